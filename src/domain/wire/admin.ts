/**
 * Wire shapes of the admin API (docs/contract.md §8), one schema each: the HTTP group
 * (src/http/adminApi.ts) serves `/openapi.json` and encodes its answers with them, the services that
 * produce them (KeyRegistry, Projects) return their `Type`s, and the dashboard's types are their
 * encoded forms (dashboard/src/api.ts imports them as types only). Schemas only, over effect and
 * src/domain — no service, no node module — so all three can import them.
 */
import { Schema } from "effect"
import * as F from "../adminFields.ts"
import { DEFAULT_PAGE_SIZE } from "../paging.ts"
import { validThresholds } from "../../../spec/events.ts"
import { RequestStatus, Receipt } from "./records.ts"

export const Environment = Schema.Literal("development", "staging", "production")

export const RateLimit = Schema.Struct({
  requests_per_minute: Schema.Int,
  burst: Schema.Int,
  /** Issue 41 item 3; present only when set. */
  tokens_per_minute: Schema.optional(Schema.Int),
  max_concurrent: Schema.optional(Schema.Int)
})

/** A project's budget window as the admin API shows it (the Ledger's window, with what is left). */
export const BudgetWindow = Schema.Struct({
  period: Schema.String,
  budget_credits: Schema.Int,
  spent: Schema.Int,
  reserved: Schema.Int,
  remaining: Schema.Int
}).annotations({ identifier: "BudgetWindow", description: "The project's budget window (all environments): spent + reserved ≤ budget_credits." })

export const KeyStatus = Schema.Literal("active", "rotated", "expired", "revoked")

const keyFields = {
  id: Schema.String,
  object: Schema.Literal("api_key"),
  project_id: Schema.String,
  environment: Environment,
  status: KeyStatus,
  created_at: Schema.String,
  expires_at: Schema.NullOr(Schema.String),
  revoked_at: Schema.NullOr(Schema.String),
  replaces: Schema.NullOr(Schema.String),
  replaced_by: Schema.NullOr(Schema.String)
}

/** A key as the registry knows it (KeyRegistry `info`, `list`, `revoke`); the admin API's lists add its last use. */
export const KeyInfo = Schema.Struct(keyFields)

export const ApiKey = Schema.Struct({
  ...keyFields,
  last_used_at: Schema.NullOr(Schema.String).annotations({ description: "Start of the key's latest governed request (the request log)." })
}).annotations({ identifier: "ApiKey" })

export const IssuedKey = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("api_key"),
  project_id: Schema.String,
  environment: Environment,
  secret: Schema.String.annotations({ description: "The full key. Shown once; only its hash is stored." }),
  created_at: Schema.String,
  /** Present only when the key sets its own upstream limits. */
  rate_limit: Schema.optional(Schema.Struct({ tokens_per_minute: Schema.optional(Schema.Int), max_concurrent: Schema.optional(Schema.Int) })),
  /** Present only when the key was created with its own budget (GET /admin/v1/keys/{id}/budget shows its window). */
  budget_credits: Schema.optional(Schema.Int)
}).annotations({ identifier: "IssuedKey" })

export const RotatedKey = Schema.Struct({
  ...IssuedKey.fields,
  replaces: Schema.String,
  old_key_expires_at: Schema.String
}).annotations({ identifier: "RotatedKey" })

const { id: projectId, ...projectRest } = {
  id: Schema.String,
  organization: Schema.String,
  name: Schema.String,
  budget_credits: Schema.Int,
  rate_limit: RateLimit,
  alert_thresholds_percent: Schema.Array(Schema.Int).annotations({ description: "Percents of the cap whose crossing emits budget.threshold_reached, once per window (default [50, 80, 100])." }),
  budget_period: Schema.String.annotations({ description: "month, week, day or total: the window every cap of the project counts in." }),
  time_zone: Schema.String.annotations({ description: "The IANA time zone its windows are counted in." }),
  created_at: Schema.String,
  updated_at: Schema.String
}

/** A project as the Projects service stores and returns it; the admin API's answers add `object` and its window. */
export const ProjectRecord = Schema.Struct({ id: projectId, ...projectRest })

const summaryFields = { id: projectId, object: Schema.Literal("project"), ...projectRest, current_window: BudgetWindow }

export const ProjectSummary = Schema.Struct(summaryFields).annotations({ identifier: "ProjectSummary" })

export const Project = Schema.Struct({
  ...summaryFields,
  keys: Schema.Array(ApiKey).annotations({ description: `The first page of the project's keys, oldest first (${DEFAULT_PAGE_SIZE} at most); the rest from GET /admin/v1/projects/{id}/keys.` }),
  keys_has_more: Schema.Boolean.annotations({ description: "More keys follow: GET /admin/v1/projects/{id}/keys?cursor=<the id of the last key here>." })
}).annotations({
  identifier: "Project",
  description: "A team session sees only the keys of its own environment."
})

/** An admin list's page (src/domain/paging.ts): every admin list answers this shape. */
export const listPage = <A, I, R>(item: Schema.Schema<A, I, R>, identifier: string, description: string) =>
  Schema.Struct({
    object: Schema.Literal("list"),
    data: Schema.Array(item),
    has_more: Schema.Boolean,
    next_cursor: Schema.NullOr(Schema.String).annotations({ description: "Pass it as cursor for the next page; null on the last page." })
  }).annotations({ identifier, description })

export const ProjectList = listPage(ProjectSummary, "ProjectList", "Oldest first; a team session sees its own project only.")

export const ApiKeyList = listPage(ApiKey, "ApiKeyList", "Oldest first; a team session sees only the keys of its own environment.")

// An admin's writes are bounded where they are decoded (src/domain/adminFields.ts); what the store
// already holds is read back as it is (the answers' schemas above take any integer).
/** A project's alert thresholds as written (spec/events.ts `validThresholds`): 1 to 10 distinct whole percents, 1 to 100. */
const AlertThresholds = Schema.Array(Schema.Int).pipe(
  Schema.filter((v) => validThresholds(v), { message: () => "Expected 1 to 10 distinct whole percents, each from 1 to 100" })
)

export const NewProject = Schema.Struct({
  name: F.ProjectName,
  organization: Schema.optional(F.Organization),
  budget_credits: F.BudgetCredits,
  rate_limit: Schema.Struct({
    requests_per_minute: F.RequestsPerMinute,
    burst: Schema.optional(F.Burst),
    tokens_per_minute: Schema.optional(Schema.NullOr(F.TokensPerMinute)),
    max_concurrent: Schema.optional(Schema.NullOr(F.MaxConcurrent))
  }),
  alert_thresholds_percent: Schema.optional(AlertThresholds),
  budget_period: Schema.optional(F.BudgetPeriod),
  time_zone: Schema.optional(F.TimeZone)
})

export const ProjectPatch = Schema.Struct({
  name: Schema.optional(F.ProjectName),
  budget_credits: Schema.optional(F.BudgetCredits),
  rate_limit: Schema.optional(
    Schema.Struct({
      requests_per_minute: Schema.optional(F.RequestsPerMinute),
      burst: Schema.optional(F.Burst),
      /** null removes the limit. */
      tokens_per_minute: Schema.optional(Schema.NullOr(F.TokensPerMinute)),
      max_concurrent: Schema.optional(Schema.NullOr(F.MaxConcurrent))
    })
  ),
  alert_thresholds_percent: Schema.optional(AlertThresholds),
  budget_period: Schema.optional(F.BudgetPeriod),
  time_zone: Schema.optional(F.TimeZone)
})

export const NewKey = Schema.Struct({
  environment: Environment,
  /** The key's own budget (issue 41), held with its project's on every call; absent or null: none. */
  budget_credits: Schema.optional(Schema.NullOr(F.BudgetCredits)),
  /** The key's own upstream limits (issue 41 item 3), besides its project's; a rotation's key keeps them. */
  rate_limit: Schema.optional(
    Schema.Struct({ tokens_per_minute: Schema.optional(Schema.NullOr(F.TokensPerMinute)), max_concurrent: Schema.optional(Schema.NullOr(F.MaxConcurrent)) })
  )
})

export const Rotation = Schema.Struct({ grace_seconds: Schema.optional(F.GraceSeconds) })

export const SignIn = Schema.Struct({ token: Schema.String.annotations({ description: "The admin token (operator) or a project key (team, read-only)" }) })

export const SessionInfo = Schema.Struct({
  object: Schema.Literal("session"),
  role: Schema.Literal("operator", "team"),
  project_id: Schema.NullOr(Schema.String),
  environment: Schema.NullOr(Environment),
  csrf_token: Schema.String.annotations({ description: "Send it as X-CSRF-Token on every cookie-authenticated write. Keep it in memory only." }),
  expires_at: Schema.String
}).annotations({ identifier: "Session" })

export const SignedOut = Schema.Struct({ object: Schema.Literal("session"), signed_out: Schema.Literal(true) })

export const DailyUsage = Schema.Struct({
  object: Schema.Literal("project_usage"),
  project_id: Schema.String,
  environment: Schema.NullOr(Environment),
  period: Schema.String,
  budget: BudgetWindow,
  days: Schema.Array(Schema.Struct({ date: Schema.String, model: Schema.String, requests: Schema.Int, credits: Schema.Int })),
  receipts: Schema.Int,
  receipts_credits: Schema.Int.annotations({ description: "Σ credits_charged of the window's receipts; over all environments it equals budget.spent." })
}).annotations({ identifier: "ProjectUsage", description: "Credits and requests per UTC day (of settlement) and model, from the window's receipts." })

export const RequestListItem = Schema.Struct({
  ...RequestStatus.fields,
  environment: Environment,
  key_id: Schema.String,
  idempotency_key: Schema.NullOr(Schema.String)
}).annotations({ identifier: "RequestLogEntry" })

export const RequestPage = listPage(RequestListItem, "RequestPage", "Newest first; pass next_cursor as cursor for the next page.")

const ChainLink = Schema.NullOr(Schema.Struct({ seq: Schema.Int, request_id: Schema.String, environment: Schema.String, hash: Schema.String }))

export const ReceiptView = Schema.Struct({
  object: Schema.Literal("receipt_view"),
  receipt: Receipt,
  previous: ChainLink.annotations({ description: "The receipt before it in the project's chain (its hash is this receipt's prev_hash); null for seq 1." }),
  next: ChainLink
}).annotations({ identifier: "ReceiptView" })
