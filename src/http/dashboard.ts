/**
 * The web dashboard (issue 17): its static files under /dashboard, its sign-in session, and the
 * admin API reads it needs (projects list, usage per day, the request log, receipts with their
 * chain links). Every route here is in the OpenAPI document (src/http/adminApi.ts); the page calls
 * nothing else. The built page lives in dashboard/dist (built by `npm ci` / `npm start`, see
 * dashboard/README.md); it is read once, on its first request, and served from memory.
 */
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Clock, Effect } from "effect"
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, extname, join, relative, sep } from "node:path"
import { fileURLToPath } from "node:url"
import { gzipSync } from "node:zlib"
import { InvalidRequest } from "../domain/errors.ts"
import { Activity } from "../services/Activity.ts"
import type { KeyInfo } from "../services/KeyRegistry.ts"
import { Ledger } from "../services/Ledger.ts"
import { Projects } from "../services/Projects.ts"
import { type Session, Sessions, type Viewer } from "../services/Sessions.ts"
import { errorResponse, unknownRoute, wireError } from "./errors.ts"
import { jsonObjectBody } from "./request.ts"
import { adminRoute, cookieOptions, CSRF_HEADER, json, noStore, SESSION_COOKIE, viewedEnvironment, visibleProject } from "./session.ts"

// ---- Static files ----

/**
 * The build's folder: the first `dashboard/dist` with an index.html found walking up from this
 * module — `src/http/` when run from the sources, `dist/` (or a test's bundle folder) when bundled.
 */
const findDist = (): string | undefined => {
  let dir = dirname(fileURLToPath(import.meta.url))
  for (;;) {
    const candidate = join(dir, "dashboard", "dist")
    if (existsSync(join(candidate, "index.html"))) return candidate
    const parent = dirname(dir)
    if (parent === dir) return undefined
    dir = parent
  }
}

/**
 * The page's Content-Security-Policy: only this origin's scripts, styles and API; no inline script
 * or style, no framing, no plugins. The charts draw on canvas; copy uses the Clipboard API.
 */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'"
].join("; ")

const SECURITY_HEADERS = {
  "content-security-policy": DASHBOARD_CSP,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  "cross-origin-opener-policy": "same-origin",
  "permissions-policy": "camera=(), microphone=(), geolocation=()"
}

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".json": "application/json",
  ".webmanifest": "application/manifest+json"
}

interface Asset {
  readonly body: Uint8Array
  /** The same bytes gzipped once at load (text types only), served to clients that accept gzip. */
  readonly gzip: Uint8Array | undefined
  readonly type: string
  readonly immutable: boolean
}

let assets: Map<string, Asset> | undefined

/** Every file of the built page by URL path (`/dashboard/…`), read once. */
const loadAssets = (): Map<string, Asset> => {
  if (assets !== undefined) return assets
  const found = new Map<string, Asset>()
  const root = findDist()
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name)
      if (statSync(path).isDirectory()) walk(path)
      else {
        const url = "/dashboard/" + relative(root!, path).split(sep).join("/")
        // Vite names built assets by content hash (assets/…-<hash>.js): cache them for good.
        const body = readFileSync(path)
        const type = TYPES[extname(name)] ?? "application/octet-stream"
        const gzip = /^(text\/|application\/json|image\/svg)/.test(type) ? gzipSync(body, { level: 9 }) : undefined
        found.set(url, { body, gzip, type, immutable: url.startsWith("/dashboard/assets/") })
      }
    }
  }
  if (root !== undefined) walk(root)
  // An empty map is not cached, so a build made after start-up is picked up.
  if (found.size > 0) assets = found
  return found
}

const notBuilt = errorResponse({
  status: 503,
  type: "server_error",
  code: "dashboard_not_built",
  message: "The dashboard is not built. `npm ci` or `npm start` builds it; or run `npm run build:dashboard`.",
  param: null,
  headers: {}
})

const serveStatic = Effect.gen(function* () {
  const req = yield* HttpServerRequest.HttpServerRequest
  const path = req.url.split("?")[0]!
  const files = loadAssets()
  if (files.size === 0) return notBuilt
  const asset = files.get(path === "/dashboard" || path === "/dashboard/" ? "/dashboard/index.html" : path)
  if (asset === undefined) return unknownRoute(req.method, req.url)
  const gzip = asset.gzip !== undefined && /\bgzip\b/.test(String(req.headers["accept-encoding"] ?? ""))
  return HttpServerResponse.uint8Array(gzip ? asset.gzip! : asset.body, {
    contentType: asset.type,
    headers: {
      ...SECURITY_HEADERS,
      "cache-control": asset.immutable ? "public, max-age=31536000, immutable" : "no-cache",
      vary: "accept-encoding",
      ...(gzip ? { "content-encoding": "gzip" } : {})
    }
  })
})

// ---- Session ----

const sessionBody = (session: Session) => ({
  object: "session" as const,
  role: session.viewer.role,
  project_id: session.viewer.role === "team" ? session.viewer.projectId : null,
  environment: session.viewer.role === "team" ? session.viewer.environment : null,
  csrf_token: session.csrfToken,
  expires_at: new Date(session.expiresAt).toISOString()
})

/**
 * POST /admin/v1/session {token}: sign in with the admin token or a project key. Only a JSON body is
 * accepted, so a cross-site form cannot sign a browser in to an attacker's session.
 */
const signIn = Effect.catchAll(
  Effect.gen(function* () {
    const req = yield* HttpServerRequest.HttpServerRequest
    const sessions = yield* Sessions
    if (!/^application\/json\b/i.test(String(req.headers["content-type"] ?? ""))) {
      return yield* new InvalidRequest({ message: "Send the sign-in as JSON: {\"token\": \"…\"}.", param: null })
    }
    const body = yield* jsonObjectBody
    if (typeof body.token !== "string" || body.token.length === 0 || body.token.length > 512) {
      return yield* new InvalidRequest({ message: "token must be the admin token or a project key.", param: "token" })
    }
    const { id, session } = yield* sessions.signIn(body.token.trim())
    return HttpServerResponse.unsafeSetCookie(json(sessionBody(session), 201), SESSION_COOKIE, id, cookieOptions(req, session.expiresAt - session.createdAt))
  }),
  (e) => Effect.succeed(errorResponse(wireError(e)))
)

const currentSession = Effect.catchAll(
  Effect.gen(function* () {
    const req = yield* HttpServerRequest.HttpServerRequest
    const sessions = yield* Sessions
    return json(sessionBody(yield* sessions.resume(req.cookies[SESSION_COOKIE])))
  }),
  (e) => Effect.succeed(errorResponse(wireError(e), noStore))
)

/** DELETE /admin/v1/session: sign out (a write: the CSRF token is required). */
const signOut = Effect.catchAll(
  Effect.gen(function* () {
    const req = yield* HttpServerRequest.HttpServerRequest
    const sessions = yield* Sessions
    const id = req.cookies[SESSION_COOKIE]
    const session = yield* sessions.resume(id)
    const csrf = req.headers[CSRF_HEADER]
    yield* sessions.checkCsrf(session, typeof csrf === "string" ? csrf : undefined)
    yield* sessions.signOut(id)
    return HttpServerResponse.expireCookie(json({ object: "session", signed_out: true }), SESSION_COOKIE, cookieOptions(req))
  }),
  (e) => Effect.succeed(errorResponse(wireError(e)))
)

// ---- Admin reads for the dashboard ----

const params = HttpRouter.params
const query = HttpServerRequest.ParsedSearchParams
const text = (v: string | ReadonlyArray<string> | undefined): string | undefined => (typeof v === "string" && v.length > 0 ? v : undefined)

/** A project's keys as a viewer may see them (a team: its own environment), with each key's last use. */
export const keysWithLastUse = (projectId: string, keys: ReadonlyArray<KeyInfo>, viewer: Viewer) =>
  Effect.gen(function* () {
    const activity = yield* Activity
    const lastUsed = yield* activity.keysLastUsed(projectId)
    return keys
      .filter((k) => viewer.role === "operator" || k.environment === viewer.environment)
      .map((k) => ({ ...k, last_used_at: lastUsed.get(k.id) ?? null }))
  })

const currentWindow = (projectId: string, period: string) =>
  Effect.map(Effect.flatMap(Ledger, (ledger) => ledger.window(projectId, period)), (w) => ({
    period: w.period,
    budget_credits: w.cap,
    spent: w.spent,
    reserved: w.reserved,
    remaining: Math.max(0, w.cap - w.spent - w.reserved)
  }))

const listProjects = adminRoute(
  (_req, viewer) =>
    Effect.gen(function* () {
      const projects = yield* Projects
      const ledger = yield* Ledger
      const now = yield* Clock.currentTimeMillis
      const all = viewer.role === "team" ? [yield* projects.get(viewer.projectId)] : yield* projects.list
      const data = []
      for (const p of all) data.push({ ...p, object: "project" as const, current_window: yield* currentWindow(p.id, ledger.periodOf(now)) })
      return json({ object: "list", data })
    }),
  "reader"
)

const projectUsage = adminRoute(
  (_req, viewer) =>
    Effect.gen(function* () {
      const projects = yield* Projects
      const ledger = yield* Ledger
      const activity = yield* Activity
      const { id } = yield* params
      const q = yield* query
      yield* visibleProject(viewer, id!)
      yield* projects.get(id!)
      const now = yield* Clock.currentTimeMillis
      const period = text(q.period) ?? ledger.periodOf(now)
      if (!/^\d{4}-(0[1-9]|1[0-2])$/.test(period)) return yield* new InvalidRequest({ message: "period must be a month written YYYY-MM.", param: "period" })
      const environment = yield* viewedEnvironment(viewer, text(q.environment))
      const usage = yield* activity.dailyUsage(id!, period, environment)
      return json({ object: "project_usage", project_id: id, environment: environment ?? null, period, budget: yield* currentWindow(id!, period), ...usage })
    }),
  "reader"
)

const STATUSES = new Set(["pending", "completed", "failed"])

const listRequests = adminRoute(
  (_req, viewer) =>
    Effect.gen(function* () {
      const projects = yield* Projects
      const activity = yield* Activity
      const { id } = yield* params
      const q = yield* query
      yield* visibleProject(viewer, id!)
      yield* projects.get(id!)
      const environment = yield* viewedEnvironment(viewer, text(q.environment))
      const status = text(q.status)
      if (status !== undefined && !STATUSES.has(status)) return yield* new InvalidRequest({ message: "status must be pending, completed or failed.", param: "status" })
      const limitText = text(q.limit) ?? "25"
      const limit = Number(limitText)
      if (!/^\d+$/.test(limitText) || limit < 1 || limit > 100) return yield* new InvalidRequest({ message: "limit must be an integer from 1 to 100.", param: "limit" })
      const qText = text(q.q)
      if (qText !== undefined && qText.length > 200) return yield* new InvalidRequest({ message: "q is at most 200 characters.", param: "q" })
      const page = yield* activity.listRequests({ projectId: id!, environment, status, model: text(q.model), q: qText, cursor: text(q.cursor), limit })
      return json({ object: "list", ...page })
    }),
  "reader"
)

const getRequest = adminRoute(
  (_req, viewer) =>
    Effect.gen(function* () {
      const activity = yield* Activity
      const { id, request_id } = yield* params
      yield* visibleProject(viewer, id!)
      return json(yield* activity.findRequest(id!, request_id!, viewer.role === "team" ? viewer.environment : undefined))
    }),
  "reader"
)

const getReceipt = adminRoute(
  (_req, viewer) =>
    Effect.gen(function* () {
      const activity = yield* Activity
      const { id, request_id } = yield* params
      yield* visibleProject(viewer, id!)
      return json(yield* activity.receipt(id!, request_id!, viewer.role === "team" ? viewer.environment : undefined))
    }),
  "reader"
)

export const dashboardRoutes = HttpRouter.empty.pipe(
  HttpRouter.get("/dashboard", serveStatic),
  HttpRouter.get("/dashboard/*", serveStatic),
  HttpRouter.post("/admin/v1/session", signIn),
  HttpRouter.get("/admin/v1/session", currentSession),
  HttpRouter.del("/admin/v1/session", signOut),
  HttpRouter.get("/admin/v1/projects", listProjects),
  HttpRouter.get("/admin/v1/projects/:id/usage", projectUsage),
  HttpRouter.get("/admin/v1/projects/:id/requests", listRequests),
  HttpRouter.get("/admin/v1/projects/:id/requests/:request_id", getRequest),
  HttpRouter.get("/admin/v1/projects/:id/requests/:request_id/receipt", getReceipt)
)
