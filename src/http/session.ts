/**
 * Who may call the admin API, and how (issue 17):
 * - `Authorization: Bearer <admin token>`: the operator, as before (CLI, scripts). No cookie involved.
 * - the dashboard's session cookie: the operator or a team (one project and environment, read-only).
 *   Every write with a cookie must carry the session's `X-CSRF-Token`; a team session writes nothing.
 * A team asking for another project's data gets the same 404 as for an unknown id.
 */
import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Effect } from "effect"
import { AdminForbidden, AdminNotFound, type AdminUnauthorized, InvalidRequest } from "../domain/errors.ts"
import { Bootstrap } from "../services/Bootstrap.ts"
import { Sessions, type Viewer } from "../services/Sessions.ts"
import type { AdminCaller } from "./adminApi.ts"
import { header } from "./request.ts"

export const SESSION_COOKIE = "tollgate_session"
export const CSRF_HEADER = "x-csrf-token"

const isRead = (method: string) => method === "GET" || method === "HEAD"

/** Who called: what the admin middlewares provide as `AdminCaller`. */
type Caller = typeof AdminCaller.Service

/**
 * The caller by the session cookie alone (with CSRF on writes): the session's own endpoints (GET and
 * DELETE /admin/v1/session, the `SessionAuth` middleware) take nothing else.
 */
export const sessionCaller = (req: HttpServerRequest.HttpServerRequest): Effect.Effect<Caller, AdminUnauthorized | AdminForbidden, Sessions> =>
  Effect.gen(function* () {
    const sessions = yield* Sessions
    const session = yield* sessions.resume(req.cookies[SESSION_COOKIE])
    if (!isRead(req.method)) yield* sessions.checkCsrf(session, header(req, CSRF_HEADER))
    return { viewer: session.viewer, session }
  })

/**
 * The caller of an admin endpoint (the `AdminAuth` middleware): the bearer admin token wins;
 * otherwise the session cookie (with CSRF on writes).
 */
export const adminCaller = (req: HttpServerRequest.HttpServerRequest): Effect.Effect<Caller, AdminUnauthorized | AdminForbidden, Bootstrap | Sessions> =>
  Effect.gen(function* () {
    const authorization = header(req, "authorization")
    if (authorization === undefined && req.cookies[SESSION_COOKIE] !== undefined) return yield* sessionCaller(req)
    const bootstrap = yield* Bootstrap
    yield* bootstrap.authorizeAdmin(authorization)
    return { viewer: { role: "operator" } as Viewer, session: undefined }
  })

/** Where only the operator may act (the admin writes): a team session is refused. */
export const operatorOnly = (viewer: Viewer): Effect.Effect<void, AdminForbidden> =>
  viewer.role === "operator"
    ? Effect.void
    : Effect.fail(new AdminForbidden({ code: "forbidden", message: "A team session is read-only; ask an operator to make this change." }))

/** A team sees its own project only: any other id answers like an unknown one. */
export const visibleProject = (viewer: Viewer, projectId: string): Effect.Effect<void, AdminNotFound> =>
  viewer.role === "team" && viewer.projectId !== projectId ? Effect.fail(new AdminNotFound({ message: `No project with id ${projectId}.` })) : Effect.void

/** The environment a viewer reads: a team's own, or the operator's filter (validated). */
export const viewedEnvironment = (viewer: Viewer, requested: unknown): Effect.Effect<string | undefined, InvalidRequest> => {
  if (viewer.role === "team") return Effect.succeed(viewer.environment)
  if (requested === undefined || requested === "") return Effect.succeed(undefined)
  return requested === "development" || requested === "staging" || requested === "production"
    ? Effect.succeed(requested)
    : Effect.fail(new InvalidRequest({ message: "environment must be one of development, staging, production.", param: "environment" }))
}

/** Cookie attributes: HttpOnly, SameSite=Strict, whole origin; Secure when the request came over HTTPS. */
export const cookieOptions = (req: HttpServerRequest.HttpServerRequest, maxAgeMs?: number) => {
  const secure = header(req, "x-forwarded-proto") === "https" || (NodeHttpServerRequest.toIncomingMessage(req).socket as { encrypted?: boolean }).encrypted === true
  return {
    httpOnly: true,
    sameSite: "strict" as const,
    path: "/",
    secure,
    ...(maxAgeMs === undefined ? {} : { maxAge: `${Math.floor(maxAgeMs / 1000)} seconds` as const })
  }
}

export const noStore = { "cache-control": "no-store" }

export const json = (body: unknown, status = 200) => HttpServerResponse.unsafeJson(body, { status, headers: noStore })
