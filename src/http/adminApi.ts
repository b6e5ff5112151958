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
import { AdminConflict, AdminForbidden, AdminNotFound, AdminUnauthorized, InvalidRequest, RateLimited, RequestNotFound } from "../domain/errors.ts"
import type { Session, Viewer } from "../services/Sessions.ts"
import {
  ApiKeyList,
  DailyUsage,
  Environment,
  IssuedKey,
  KeyInfo,
  NewKey,
  NewProject,
  Project,
  ProjectList,
  ProjectPatch,
  ReceiptView,
  RequestListItem,
  RequestPage,
  RotatedKey,
  Rotation,
  SessionInfo,
  SignedOut,
  SignIn
} from "../domain/wire/admin.ts"
import { adminExportReceipts, adminStatement } from "./receiptsApi.ts"
import { adminErrorAt as errorAt, PageParams, PathId } from "./adminParams.ts"
import { webhooksGroup } from "./webhooksApi.ts"
import { scopeBudgetsGroup } from "./scopeBudgetsApi.ts"

// The shapes are defined once in src/domain/wire/admin.ts (the services and the dashboard take them from there).
export * from "../domain/wire/admin.ts"

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
      .addSuccess(KeyInfo.annotations({ identifier: "RevokedKey" }))
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
  .add(adminExportReceipts.addError(E.notFound))
  .add(adminStatement.addError(E.notFound))
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
    .addSuccess(SignedOut)
    .addError(E.forbidden)
    .middleware(SessionAuth)
    .annotate(OpenApi.Identifier, "admin.signOut")
    .annotate(OpenApi.Override, { tags: ["admin"] })
    .annotate(OpenApi.Description, "Sign out: ends the session and expires the cookie. Needs X-CSRF-Token.")
)

export const adminGroups = {
  admin,
  signIn,
  webhooks: webhooksGroup.addError(E.rateLimited).middleware(AdminAuth),
  scopeBudgets: scopeBudgetsGroup.addError(E.rateLimited).middleware(AdminAuth)
}
