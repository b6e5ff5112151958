/**
 * The admin API (docs/contract.md §8) and the dashboard's session, as an HttpApi group for the OpenAPI
 * document, and served from it by HttpApiBuilder (src/http/adminRoutes.ts): the `AdminAuth` middleware
 * authenticates and provides the `AdminCaller`; the writes' bodies are decoded by the payload schemas
 * exported here.
 *
 * Authentication: `Authorization: Bearer <TOLLGATE_ADMIN_TOKEN>`, or the dashboard's session cookie
 * `tollgate_session` (HttpOnly, SameSite=Strict) from POST /admin/v1/session. A cookie-authenticated
 * write must carry the session's CSRF token in `X-CSRF-Token`. A team session (signed in with a
 * project key) reads its own project and environment only; writes answer 403.
 */
import { HttpApiEndpoint, HttpApiGroup, HttpApiMiddleware, HttpApiSecurity, OpenApi } from "@effect/platform"
import { Context, Schema } from "effect"
import * as F from "../domain/adminFields.ts"
import { AdminConflict, AdminForbidden, AdminNotFound, AdminUnauthorized, InvalidRequest, RateLimited, RequestNotFound } from "../domain/errors.ts"
import type { Session, Viewer } from "../services/Sessions.ts"
import { DEFAULT_PAGE_SIZE, PageCursor, PageLimit } from "../domain/paging.ts"
import * as S from "./schemas.ts"

const errorAt = (errorClass: Schema.Schema.All, description: string) => S.errorBodyOf(errorClass, description, "AdminError")

const E = {
  invalidRequest: errorAt(InvalidRequest, "malformed JSON or fields"),
  unauthorized: errorAt(AdminUnauthorized, "missing or wrong admin token, or no live dashboard session (invalid_api_key when signing in with a bad project key)"),
  forbidden: errorAt(AdminForbidden, "a team session is read-only; invalid_csrf_token: a cookie-authenticated write without the session's X-CSRF-Token"),
  notFound: errorAt(AdminNotFound, "unknown project or key id (or another project's, for a team session)"),
  requestNotFound: errorAt(RequestNotFound, "no such request (or receipt) in this project and the session's environment"),
  conflict: errorAt(AdminConflict, "the key cannot be rotated in its state"),
  rateLimited: errorAt(RateLimited, "too many failed sign-ins or admin-token checks from this address, or at this credential: answered before the token is checked; see Retry-After")
}

/** Who called an admin endpoint (src/http/session.ts's check): the viewer, and the session when a cookie authenticated it. */
export class AdminCaller extends Context.Tag("tollgate/AdminCaller")<AdminCaller, { readonly viewer: Viewer; readonly session: Session | undefined }>() {}

const sessionCookie = HttpApiSecurity.annotate(HttpApiSecurity.apiKey({ in: "cookie", key: "tollgate_session" }), OpenApi.Description, "Dashboard session cookie; writes also need the X-CSRF-Token header.")

export class AdminAuth extends HttpApiMiddleware.Tag<AdminAuth>()("AdminAuth", {
  failure: E.unauthorized,
  provides: AdminCaller,
  security: {
    adminToken: HttpApiSecurity.bearer,
    session: sessionCookie
  }
}) {}

/** The session's own endpoints (GET and DELETE /admin/v1/session): the session cookie only, CSRF on the sign-out. */
export class SessionAuth extends HttpApiMiddleware.Tag<SessionAuth>()("SessionAuth", {
  failure: E.unauthorized,
  provides: AdminCaller,
  security: {
    session: sessionCookie
  }
}) {}

const Environment = Schema.Literal("development", "staging", "production")

const RateLimit = Schema.Struct({ requests_per_minute: Schema.Int, burst: Schema.Int })

const Window = Schema.Struct({
  period: Schema.String,
  budget_credits: Schema.Int,
  spent: Schema.Int,
  reserved: Schema.Int,
  remaining: Schema.Int
}).annotations({ identifier: "BudgetWindow", description: "The project's budget window (all environments): spent + reserved ≤ budget_credits." })

export const ApiKey = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("api_key"),
  project_id: Schema.String,
  environment: Environment,
  status: Schema.Literal("active", "rotated", "expired", "revoked"),
  created_at: Schema.String,
  expires_at: Schema.NullOr(Schema.String),
  revoked_at: Schema.NullOr(Schema.String),
  replaces: Schema.NullOr(Schema.String),
  replaced_by: Schema.NullOr(Schema.String),
  last_used_at: Schema.NullOr(Schema.String).annotations({ description: "Start of the key's latest governed request (the request log)." })
}).annotations({ identifier: "ApiKey" })

const ProjectFields = {
  id: Schema.String,
  object: Schema.Literal("project"),
  organization: Schema.String,
  name: Schema.String,
  budget_credits: Schema.Int,
  rate_limit: RateLimit,
  created_at: Schema.String,
  updated_at: Schema.String,
  current_window: Window
}

export const ProjectSummary = Schema.Struct(ProjectFields).annotations({ identifier: "ProjectSummary" })

export const Project = Schema.Struct({
  ...ProjectFields,
  keys: Schema.Array(ApiKey).annotations({ description: `The first page of the project's keys, oldest first (${DEFAULT_PAGE_SIZE} at most); the rest from GET /admin/v1/projects/{id}/keys.` }),
  keys_has_more: Schema.Boolean.annotations({ description: "More keys follow: GET /admin/v1/projects/{id}/keys?cursor=<the id of the last key here>." })
}).annotations({
  identifier: "Project",
  description: "A team session sees only the keys of its own environment."
})

/** An admin list's page (src/domain/paging.ts): every admin list answers this shape. */
const listPage = <A, I, R>(item: Schema.Schema<A, I, R>, identifier: string, description: string) =>
  Schema.Struct({
    object: Schema.Literal("list"),
    data: Schema.Array(item),
    has_more: Schema.Boolean,
    next_cursor: Schema.NullOr(Schema.String).annotations({ description: "Pass it as cursor for the next page; null on the last page." })
  }).annotations({ identifier, description })

/** The query of every admin list: `limit` and `cursor` (src/domain/paging.ts). */
const PageParams = { limit: Schema.optional(PageLimit), cursor: Schema.optional(PageCursor) }

export const ProjectList = listPage(ProjectSummary, "ProjectList", "Oldest first; a team session sees its own project only.")

export const ApiKeyList = listPage(ApiKey, "ApiKeyList", "Oldest first; a team session sees only the keys of its own environment.")

// An admin's writes are bounded where they are decoded (src/domain/adminFields.ts); what the store
// already holds is read back as it is (the answers' schemas above take any integer).
export const NewProject = Schema.Struct({
  name: F.ProjectName,
  organization: Schema.optional(F.Organization),
  budget_credits: F.BudgetCredits,
  rate_limit: Schema.Struct({ requests_per_minute: F.RequestsPerMinute, burst: Schema.optional(F.Burst) })
})

export const ProjectPatch = Schema.Struct({
  name: Schema.optional(F.ProjectName),
  budget_credits: Schema.optional(F.BudgetCredits),
  rate_limit: Schema.optional(Schema.Struct({ requests_per_minute: Schema.optional(F.RequestsPerMinute), burst: Schema.optional(F.Burst) }))
})

export const NewKey = Schema.Struct({ environment: Environment })

export const Rotation = Schema.Struct({ grace_seconds: Schema.optional(F.GraceSeconds) })

export const SignIn = Schema.Struct({ token: Schema.String.annotations({ description: "The admin token (operator) or a project key (team, read-only)" }) })

export const IssuedKey = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("api_key"),
  project_id: Schema.String,
  environment: Environment,
  secret: Schema.String.annotations({ description: "The full key. Shown once; only its hash is stored." }),
  created_at: Schema.String
}).annotations({ identifier: "IssuedKey" })

export const RotatedKey = Schema.Struct({
  ...IssuedKey.fields,
  replaces: Schema.String,
  old_key_expires_at: Schema.String
}).annotations({ identifier: "RotatedKey" })

export const SessionInfo = Schema.Struct({
  object: Schema.Literal("session"),
  role: Schema.Literal("operator", "team"),
  project_id: Schema.NullOr(Schema.String),
  environment: Schema.NullOr(Environment),
  csrf_token: Schema.String.annotations({ description: "Send it as X-CSRF-Token on every cookie-authenticated write. Keep it in memory only." }),
  expires_at: Schema.String
}).annotations({ identifier: "Session" })

export const DailyUsage = Schema.Struct({
  object: Schema.Literal("project_usage"),
  project_id: Schema.String,
  environment: Schema.NullOr(Environment),
  period: Schema.String,
  budget: Window,
  days: Schema.Array(Schema.Struct({ date: Schema.String, model: Schema.String, requests: Schema.Int, credits: Schema.Int })),
  receipts: Schema.Int,
  receipts_credits: Schema.Int.annotations({ description: "Σ credits_charged of the window's receipts; over all environments it equals budget.spent." })
}).annotations({ identifier: "ProjectUsage", description: "Credits and requests per UTC day (of settlement) and model, from the window's receipts." })

export const RequestListItem = Schema.Struct({
  ...S.RequestStatus.fields,
  environment: Environment,
  key_id: Schema.String,
  idempotency_key: Schema.NullOr(Schema.String)
}).annotations({ identifier: "RequestLogEntry" })

export const RequestPage = listPage(RequestListItem, "RequestPage", "Newest first; pass next_cursor as cursor for the next page.")

const ChainLink = Schema.NullOr(Schema.Struct({ seq: Schema.Int, request_id: Schema.String, environment: Schema.String, hash: Schema.String }))

export const ReceiptView = Schema.Struct({
  object: Schema.Literal("receipt_view"),
  receipt: S.Receipt,
  previous: ChainLink.annotations({ description: "The receipt before it in the project's chain (its hash is this receipt's prev_hash); null for seq 1." }),
  next: ChainLink
}).annotations({ identifier: "ReceiptView" })

/** An id in a path: letters, digits, `_` and `-`, at most 64 (anything else, a NUL say, is a 400 naming it, never a store error). */
const PathId = (description: string) => Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9_-]{1,64}$/)).annotations({ description })
const ProjectPath = Schema.Struct({ id: PathId("A project id, prj_…") })
const KeyPath = Schema.Struct({ id: PathId("A key id, key_…") })
const RequestPath = Schema.Struct({ id: PathId("A project id, prj_…"), request_id: PathId("A request id, req_…") })

const EnvironmentParam = Schema.optional(Environment.annotations({ description: "Operator: filter by environment. A team session always reads its own." }))

const admin = HttpApiGroup.make("admin")
  .add(HttpApiEndpoint.get("listProjects", "/admin/v1/projects").setUrlParams(Schema.Struct(PageParams)).addSuccess(ProjectList).addError(E.invalidRequest))
  .add(
    HttpApiEndpoint.post("createProject", "/admin/v1/projects")
      .setPayload(NewProject)
      .addSuccess(Project, { status: 201 })
      .addError(E.invalidRequest)
      .addError(E.forbidden)
  )
  .add(HttpApiEndpoint.get("getProject", "/admin/v1/projects/:id").setPath(ProjectPath).addSuccess(Project).addError(E.notFound))
  .add(
    HttpApiEndpoint.patch("updateProject", "/admin/v1/projects/:id")
      .setPath(ProjectPath)
      .setPayload(ProjectPatch)
      .addSuccess(Project)
      .addError(E.invalidRequest)
      .addError(E.forbidden)
      .addError(E.notFound)
  )
  .add(
    HttpApiEndpoint.post("createKey", "/admin/v1/projects/:id/keys")
      .setPath(ProjectPath)
      .setPayload(NewKey)
      .addSuccess(IssuedKey, { status: 201 })
      .addError(E.invalidRequest)
      .addError(E.forbidden)
      .addError(E.notFound)
  )
  .add(
    HttpApiEndpoint.get("listKeys", "/admin/v1/projects/:id/keys")
      .setPath(ProjectPath)
      .setUrlParams(Schema.Struct(PageParams))
      .addSuccess(ApiKeyList)
      .addError(E.invalidRequest)
      .addError(E.notFound)
  )
  .add(
    HttpApiEndpoint.post("rotateKey", "/admin/v1/keys/:id/rotate")
      .setPath(KeyPath)
      .setPayload(Rotation)
      .addSuccess(RotatedKey, { status: 201 })
      .addError(E.invalidRequest)
      .addError(E.forbidden)
      .addError(E.notFound)
      .addError(E.conflict)
  )
  .add(
    HttpApiEndpoint.post("revokeKey", "/admin/v1/keys/:id/revoke")
      .setPath(KeyPath)
      .addSuccess(ApiKey.pipe(Schema.omit("last_used_at")).annotations({ identifier: "RevokedKey" }))
      .addError(E.forbidden)
      .addError(E.notFound)
  )
  .add(
    HttpApiEndpoint.get("getProjectUsage", "/admin/v1/projects/:id/usage")
      .setPath(ProjectPath)
      .setUrlParams(Schema.Struct({ period: Schema.optional(Schema.String.annotations({ description: "YYYY-MM; default: the current window" })), environment: EnvironmentParam }))
      .addSuccess(DailyUsage)
      .addError(E.invalidRequest)
      .addError(E.notFound)
  )
  .add(
    HttpApiEndpoint.get("listRequests", "/admin/v1/projects/:id/requests")
      .setPath(ProjectPath)
      .setUrlParams(
        Schema.Struct({
          environment: EnvironmentParam,
          status: Schema.optional(Schema.Literal("pending", "completed", "failed")),
          model: Schema.optional(Schema.String.annotations({ description: "The requested model or the route that served it" })),
          q: Schema.optional(Schema.String.annotations({ description: "Substring of the request id, idempotency key, receipt id, model or route" })),
          ...PageParams
        })
      )
      .addSuccess(RequestPage)
      .addError(E.invalidRequest)
      .addError(E.notFound)
  )
  .add(
    HttpApiEndpoint.get("getProjectRequest", "/admin/v1/projects/:id/requests/:request_id")
      .setPath(RequestPath)
      .addSuccess(RequestListItem)
      .addError(E.requestNotFound)
  )
  .add(
    HttpApiEndpoint.get("getProjectReceipt", "/admin/v1/projects/:id/requests/:request_id/receipt")
      .setPath(RequestPath)
      .addSuccess(ReceiptView)
      .addError(E.requestNotFound)
  )
  .addError(E.rateLimited)
  .middleware(AdminAuth)

/**
 * The dashboard's session. Sign-in takes a token in the body, not a header: it is the one admin call
 * without prior authentication; reading the session and signing out take its cookie only (`SessionAuth`,
 * their own middleware: a group's middleware covers all its endpoints). Those two keep the operation ids
 * and tag they had in the `admin` group, so the OpenAPI document names them as before.
 */
const signIn = HttpApiGroup.make("session").add(
  HttpApiEndpoint.post("signIn", "/admin/v1/session")
    .setPayload(SignIn)
    .addSuccess(SessionInfo, { status: 201 })
    .addError(E.invalidRequest)
    .addError(E.unauthorized)
    .addError(E.rateLimited)
    .annotate(
      OpenApi.Description,
      "Dashboard sign-in. Sets the session cookie tollgate_session (HttpOnly, SameSite=Strict, Path=/; Secure over HTTPS). Content-Type must be application/json. Failed sign-ins are throttled per client address and per credential: 429 rate_limited with Retry-After, before the token is checked."
    )
).add(
  HttpApiEndpoint.get("getSession", "/admin/v1/session")
    .addSuccess(SessionInfo)
    .middleware(SessionAuth)
    .annotate(OpenApi.Identifier, "admin.getSession")
    .annotate(OpenApi.Override, { tags: ["admin"] })
    .annotate(OpenApi.Description, "The current dashboard session (cookie), with its CSRF token.")
).add(
  HttpApiEndpoint.del("signOut", "/admin/v1/session")
    .addSuccess(Schema.Struct({ object: Schema.Literal("session"), signed_out: Schema.Literal(true) }))
    .addError(E.forbidden)
    .middleware(SessionAuth)
    .annotate(OpenApi.Identifier, "admin.signOut")
    .annotate(OpenApi.Override, { tags: ["admin"] })
    .annotate(OpenApi.Description, "Sign out: ends the session and expires the cookie. Needs X-CSRF-Token.")
)

export const adminGroups = { admin, signIn }
