/**
 * Wire shapes of the key and end-user budgets in the admin API (issue 41, docs/contract.md §8): the
 * payloads of PATCH /admin/v1/keys/{id} and PUT /admin/v1/projects/{id}/end_users/{user}, and what
 * they and the end-user reads answer. Schemas only (see ./admin.ts).
 */
import { Schema } from "effect"
import * as F from "../adminFields.ts"
import { MAX_END_USER_LENGTH } from "../chat.ts"

/** A cap of a key or an end user: Credits a window, or null for none (held without a limit, its spending still counted). */
export const ScopeCap = Schema.NullOr(F.BudgetCredits).annotations({
  description: `Credits a budget window: 0 to ${F.MAX_BUDGET_CREDITS}; null: no budget (its spending is still counted, so a cap set later counts it).`
})

/** A key's own upstream limits as a PATCH sets them (issue 41 item 3): null removes one. */
const KeyLimitsPatch = Schema.Struct({
  tokens_per_minute: Schema.optional(Schema.NullOr(F.TokensPerMinute)),
  max_concurrent: Schema.optional(Schema.NullOr(F.MaxConcurrent))
})

/** Either field may be left out (kept as it is). */
export const KeyPatch = Schema.Struct({ budget_credits: Schema.optional(ScopeCap), rate_limit: Schema.optional(KeyLimitsPatch) })

/** An end user's override: its cap, and its own upstream limits (DESIGN §9; absent or null: none — a PUT replaces both). */
export const EndUserPut = Schema.Struct({ budget_credits: ScopeCap, rate_limit: Schema.optional(KeyLimitsPatch) })

/** A scope's own upstream limits as answered: only those set. */
const LimitsShown = Schema.Struct({ tokens_per_minute: Schema.optional(Schema.Int), max_concurrent: Schema.optional(Schema.Int) })

/** A scope's current window: what it spent, holds, and has left (null: no cap). */
const windowFields = {
  period: Schema.String,
  spent: Schema.Int,
  reserved: Schema.Int,
  remaining: Schema.NullOr(Schema.Int)
}

export const KeyBudget = Schema.Struct({
  object: Schema.Literal("key_budget"),
  key_id: Schema.String,
  project_id: Schema.String,
  budget_credits: Schema.NullOr(Schema.Int),
  ...windowFields,
  /** The key's own upstream limits, on a PATCH that set them (present only when set). */
  rate_limit: Schema.optional(LimitsShown)
}).annotations({ identifier: "KeyBudget", description: "A key's budget and its current window: spent + reserved ≤ budget_credits." })

export const EndUser = Schema.Struct({
  object: Schema.Literal("end_user"),
  project_id: Schema.String,
  user: Schema.String,
  budget_credits: Schema.NullOr(Schema.Int).annotations({ description: "The cap that applies: the override, else the project's end_user_budget_credits, else null (none)." }),
  budget_source: Schema.Literal("override", "project_default", "none"),
  ...windowFields,
  rate_limit: Schema.optional(LimitsShown).annotations({ description: "The end user's own upstream limits (its override's; absent: none)." }),
  created_at: Schema.NullOr(Schema.String).annotations({ description: "When the override was set (null: none)." }),
  updated_at: Schema.NullOr(Schema.String)
}).annotations({ identifier: "EndUser", description: "An end user of a project (the body's user, else metadata.end_user) and its budget." })

export const EndUserList = Schema.Struct({
  object: Schema.Literal("list"),
  data: Schema.Array(EndUser),
  has_more: Schema.Boolean,
  next_cursor: Schema.NullOr(Schema.String)
}).annotations({ identifier: "EndUserList", description: "A project's end users: with an override, by name; or (order=spent) the current window's, most spent first." })

/** An end user in a path: 1 to MAX_END_USER_LENGTH characters (percent-decoded). */
export const EndUserName = Schema.String.pipe(
  Schema.filter((s) => s.length >= 1 && s.length <= MAX_END_USER_LENGTH, {
    message: () => `Expected 1 to ${MAX_END_USER_LENGTH} characters`,
    jsonSchema: { minLength: 1, maxLength: MAX_END_USER_LENGTH }
  })
).annotations({ description: `The end user, as a request names it (user, or metadata.end_user): 1 to ${MAX_END_USER_LENGTH} characters.` })
