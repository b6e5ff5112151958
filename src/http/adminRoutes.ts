/**
 * The admin API (docs/contract.md §8) served by HttpApiBuilder from PublicApi's `admin` and `session`
 * groups (src/http/adminApi.ts): projects and their keys, the dashboard's reads (usage per day, the
 * request log, receipts with chain links) and its session. Path and query decoded by the endpoints'
 * schemas, successes encoded by them; a write's body read within the body limits and decoded by its
 * payload schema (`decodedBody`), never cast.
 *
 * Who may call is the `AdminAuth` middleware's: src/http/session.ts's check on the raw request (admin
 * token or session cookie, CSRF on a cookie's writes), providing the `AdminCaller`; the session's own
 * GET and DELETE take the cookie only (`SessionAuth`); a write refuses a team session (`operatorOnly`). A handler's domain failure is answered in its wire form
 * (`respondErrors`); a middleware's and a decode failure by the app's catch-all (./app.ts).
 */
import { HttpApiBuilder, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { exportResponse, statementOf } from "./receiptsRoutes.ts"
import { Clock, type Context, Effect, Layer } from "effect"
import { type AdminForbidden, type AdminUnauthorized, InvalidRequest, type RateLimited } from "../domain/errors.ts"
import { available } from "../../spec/ledger.ts"
import { type PageRequest, pageRequest } from "../domain/paging.ts"
import { Activity } from "../services/Activity.ts"
import { KeyRegistry } from "../services/KeyRegistry.ts"
import { type BudgetWindow, Ledger, periodSettings, windowOfCall, windowParam } from "../services/Ledger.ts"
import { Projects } from "../services/Projects.ts"
import { type Session, Sessions, type Viewer } from "../services/Sessions.ts"
import { AdminAuth, AdminCaller, type ApiKey, type BudgetWindow as WindowView, type DailyUsage, NewKey, NewProject, type Project, ProjectPatch, type RequestListItem, type RequestPage, Rotation, SessionAuth, type SessionInfo, SignIn } from "./adminApi.ts"
import { PublicApi } from "./api.ts"
import { respondErrors } from "./caller.ts"
import { decodedBody, header } from "./request.ts"
import { webhooksRoutes } from "./webhooksRoutes.ts"
import { scopeBudgetsRoutes } from "./scopeBudgetsRoutes.ts"
import { type AdminCheckServices, adminCaller, clientOf, cookieOptions, json, operatorOnly, SESSION_COOKIE, sessionCaller, viewedEnvironment, visibleProject } from "./session.ts"

/**
 * A caller check (src/http/session.ts) as a middleware's security handler: run on the raw request with
 * the services it needs. The middlewares declare the 401 only; a check's other failures, the CSRF 403
 * of a cookie's write and the 429 of a throttled admin token, are answered by the app's catch-all
 * (./app.ts) — hence the one cast, here.
 */
const runCheck =
  <R>(services: Context.Context<R>, check: (req: HttpServerRequest.HttpServerRequest) => Effect.Effect<typeof AdminCaller.Service, AdminUnauthorized | AdminForbidden | RateLimited, R>) =>
  () =>
    Effect.flatMap(HttpServerRequest.HttpServerRequest, (req) => Effect.provide(check(req), services)) as unknown as Effect.Effect<typeof AdminCaller.Service, never>

/**
 * The admin check as the middleware of the `admin` group. The platform tries a middleware's security
 * schemes in order and answers the last one's failure; the check reads the raw request itself (the
 * bearer token wins, else the cookie, with CSRF on writes), so the first scheme declines at once and
 * the second runs the whole check exactly once, keeping today's statuses and messages.
 */
export const AdminAuthLive = Layer.effect(
  AdminAuth,
  Effect.map(Effect.context<AdminCheckServices>(), (services) => AdminAuth.of({ adminToken: () => Effect.fail(undefined) as never, session: runCheck(services, adminCaller) }))
)

/**
 * The session's own endpoints' check (GET and DELETE /admin/v1/session): the cookie only, CSRF on the
 * sign-out (src/http/session.ts `sessionCaller`); one security scheme, so it runs once.
 */
export const SessionAuthLive = Layer.effect(
  SessionAuth,
  Effect.map(Effect.context<Sessions>(), (services) => SessionAuth.of({ session: runCheck(services, sessionCaller) }))
)

/** A page of a project's keys as a viewer may see them (a team: its own environment), with each key's last use. */
const keysPage = (projectId: string, viewer: Viewer, request: PageRequest) =>
  Effect.gen(function* () {
    const page = yield* (yield* KeyRegistry).list(projectId, teamEnvironment(viewer), request)
    const lastUsed = yield* (yield* Activity).keysLastUsed(projectId, page.data.map((k) => k.id))
    return { ...page, data: page.data.map((k): typeof ApiKey.Type => ({ ...k, last_used_at: lastUsed.get(k.id) ?? null })) }
  })

const windowView = (w: BudgetWindow): typeof WindowView.Type => ({ period: w.period, budget_credits: w.cap, spent: w.spent, reserved: w.reserved, remaining: available(w) })

const budgetWindow = (projectId: string, period: string) => Effect.map(Effect.flatMap(Ledger, (ledger) => ledger.window(projectId, period)), windowView)

const currentPeriod = Effect.flatMap(Ledger, (ledger) => Effect.map(Clock.currentTimeMillis, (now) => ledger.periodOf(now)))

/** The window a project's calls fall in now: its budget period in its time zone (spec/periods.ts). */
const currentWindowOf = (project: { readonly budget_period: string; readonly time_zone: string }) =>
  Effect.map(Clock.currentTimeMillis, (now) => windowOfCall(periodSettings(project), now))

/** A project with its current window and the first page of its keys (docs/contract.md §8). */
const projectView = (id: string, viewer: Viewer = { role: "operator" }) =>
  Effect.gen(function* () {
    const project = yield* (yield* Projects).get(id)
    const keys = yield* keysPage(id, viewer, pageRequest({}))
    const answer: typeof Project.Type = {
      ...project,
      object: "project" as const,
      current_window: yield* budgetWindow(id, yield* currentWindowOf(project)),
      keys: keys.data,
      keys_has_more: keys.has_more
    }
    return answer
  })

const sessionBody = (session: Session): typeof SessionInfo.Type => ({
  object: "session" as const,
  role: session.viewer.role,
  project_id: session.viewer.role === "team" ? session.viewer.projectId : null,
  environment: session.viewer.role === "team" ? session.viewer.environment : null,
  csrf_token: session.csrfToken,
  expires_at: new Date(session.expiresAt).toISOString()
})

/** The caller, refused unless it is the operator (every admin write but sign-out). */
const operator = Effect.flatMap(AdminCaller, (caller) => operatorOnly(caller.viewer))

const viewer = Effect.map(AdminCaller, (caller) => caller.viewer)

/** The viewer, after checking it may see project `id` (a team: its own only). */
const viewerOf = (id: string) => Effect.tap(viewer, (v) => visibleProject(v, id))

const teamEnvironment = (v: Viewer) => (v.role === "team" ? v.environment : undefined)

const adminGroup = HttpApiBuilder.group(PublicApi, "admin", (handlers) =>
  handlers
    .handle("listProjects", ({ urlParams }) =>
      respondErrors(Effect.gen(function* () {
        const v = yield* viewer
        const month = yield* currentPeriod
        const page = yield* (yield* Projects).page(month, pageRequest(urlParams), v.role === "team" ? v.projectId : undefined)
        // The page's windows are read for this month; a project counting in another period or zone reads its own.
        const data = yield* Effect.forEach(page.data, ({ project, window }) =>
          Effect.map(
            Effect.flatMap(currentWindowOf(project), (own) => (own === month ? Effect.succeed(windowView(window)) : budgetWindow(project.id, own))),
            (current) => ({ ...project, object: "project" as const, current_window: current })
          ))
        return { object: "list" as const, ...page, data }
      }))
    )
    .handleRaw("createProject", () =>
      respondErrors(Effect.gen(function* () {
        yield* operator
        const created = yield* (yield* Projects).create(yield* decodedBody(NewProject))
        return yield* projectView(created.id)
      }))
    )
    .handle("getProject", ({ path }) => respondErrors(Effect.flatMap(viewerOf(path.id), (v) => projectView(path.id, v))))
    .handleRaw("updateProject", ({ path }) =>
      respondErrors(Effect.gen(function* () {
        yield* operator
        const patch = yield* decodedBody(ProjectPatch)
        yield* (yield* Projects).update(path.id, patch)
        yield* (yield* KeyRegistry).forgetProject(path.id)
        return yield* projectView(path.id)
      }))
    )
    .handleRaw("createKey", ({ path }) =>
      respondErrors(Effect.gen(function* () {
        yield* operator
        const body = yield* decodedBody(NewKey)
        return yield* (yield* KeyRegistry).create(path.id, body.environment, body.rate_limit, body.budget_credits)
      }))
    )
    .handle("listKeys", ({ path, urlParams }) =>
      respondErrors(Effect.gen(function* () {
        const v = yield* viewerOf(path.id)
        return { object: "list" as const, ...(yield* keysPage(path.id, v, pageRequest(urlParams))) }
      }))
    )
    .handleRaw("rotateKey", ({ path }) =>
      respondErrors(Effect.gen(function* () {
        yield* operator
        const body = yield* decodedBody(Rotation, { optional: true })
        return yield* (yield* KeyRegistry).rotate(path.id, body.grace_seconds ?? 86_400)
      }))
    )
    .handle("revokeKey", ({ path }) => respondErrors(Effect.zipRight(operator, Effect.flatMap(KeyRegistry, (keys) => keys.revoke(path.id)))))
    .handle("getProjectUsage", ({ path, urlParams }) =>
      respondErrors(Effect.gen(function* () {
        const v = yield* viewerOf(path.id)
        const project = yield* (yield* Projects).get(path.id)
        const period = urlParams.period === undefined ? yield* currentWindowOf(project) : yield* windowParam(periodSettings(project), urlParams.period)
        const environment = yield* viewedEnvironment(v, urlParams.environment)
        const usage = yield* (yield* Activity).dailyUsage(path.id, period, environment)
        const answer = { object: "project_usage" as const, project_id: path.id, environment: environment ?? null, period, budget: yield* budgetWindow(path.id, period), ...usage }
        return answer as typeof DailyUsage.Type // the store's environments are strings; encoding checks them

      }))
    )
    .handle("listRequests", ({ path, urlParams }) =>
      respondErrors(Effect.gen(function* () {
        const v = yield* viewerOf(path.id)
        yield* (yield* Projects).get(path.id)
        const environment = yield* viewedEnvironment(v, urlParams.environment)
        if (urlParams.q !== undefined && urlParams.q.length > 200) return yield* new InvalidRequest({ message: "q is at most 200 characters.", param: "q" })
        const nonEmpty = (s: string | undefined) => (s === "" ? undefined : s)
        const page = yield* (yield* Activity).listRequests({
          projectId: path.id,
          environment,
          status: urlParams.status,
          model: nonEmpty(urlParams.model),
          q: nonEmpty(urlParams.q),
          ...pageRequest(urlParams)
        })
        return { object: "list" as const, ...page } as typeof RequestPage.Type // as above
      }))
    )
    .handle("getProjectRequest", ({ path }) =>
      respondErrors(Effect.flatMap(viewerOf(path.id), (v) => Effect.flatMap(Activity, (activity) => Effect.map(activity.findRequest(path.id, path.request_id, teamEnvironment(v)), (r) => r as typeof RequestListItem.Type))))
    )
    .handleRaw("exportProjectReceipts", ({ path, urlParams }) => respondErrors(Effect.flatMap(viewerOf(path.id), () => exportResponse(path.id, urlParams))))
    .handle("getProjectStatement", ({ path }) => respondErrors(Effect.zipRight(Effect.zipRight(viewerOf(path.id), Effect.flatMap(Projects, (p) => p.get(path.id))), statementOf(path.id, path.period))))
    .handle("getProjectReceipt", ({ path }) =>
      respondErrors(Effect.flatMap(viewerOf(path.id), (v) => Effect.flatMap(Activity, (activity) => activity.receipt(path.id, path.request_id, teamEnvironment(v)))))
    )
)

/**
 * POST /admin/v1/session {token}: sign in with the admin token or a project key. Only a JSON body is
 * accepted, so a cross-site form cannot sign a browser in to an attacker's session. Failed sign-ins
 * are throttled per client address and per credential (429 before the token is checked; Sessions).
 */
const sessionGroup = HttpApiBuilder.group(PublicApi, "session", (handlers) =>
  handlers.handleRaw("signIn", ({ request }) =>
    respondErrors(Effect.gen(function* () {
      if (!/^application\/json\b/i.test(header(request, "content-type") ?? "")) {
        return yield* new InvalidRequest({ message: "Send the sign-in as JSON: {\"token\": \"…\"}.", param: null })
      }
      const body = yield* decodedBody(SignIn)
      if (body.token.length === 0 || body.token.length > 512) {
        return yield* new InvalidRequest({ message: "token must be the admin token or a project key.", param: "token" })
      }
      const client = yield* clientOf(request)
      const { id, session } = yield* (yield* Sessions).signIn(body.token.trim(), client.address)
      return HttpServerResponse.unsafeSetCookie(json(sessionBody(session), 201), SESSION_COOKIE, id, cookieOptions(client, session.expiresAt - session.createdAt))
    }))
  )
    // SessionAuth resumed the cookie's session for these two (src/http/session.ts), CSRF checked on the sign-out.
    .handle("getSession", () => Effect.map(AdminCaller, (caller) => sessionBody(caller.session!)))
    .handle("signOut", ({ request }) =>
      respondErrors(Effect.gen(function* () {
        yield* (yield* Sessions).signOut(request.cookies[SESSION_COOKIE])
        return HttpServerResponse.expireCookie(json({ object: "session", signed_out: true }), SESSION_COOKIE, cookieOptions(yield* clientOf(request)))
      }))
    )
)

/** The admin groups' layers, for the HttpApi's router (./apiRoutes.ts). */
export const adminGroups = Layer.mergeAll(adminGroup.pipe(Layer.provide(AdminAuthLive)), sessionGroup.pipe(Layer.provide(SessionAuthLive)), webhooksRoutes.pipe(Layer.provide(AdminAuthLive)),
  scopeBudgetsRoutes.pipe(Layer.provide(AdminAuthLive))
)
