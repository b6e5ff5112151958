/**
 * The web dashboard's static files under /dashboard (issue 17). The admin API reads the page calls
 * (session, projects, usage per day, the request log, receipts with their chain links) are served
 * from the OpenAPI document's admin groups (src/http/adminRoutes.ts); the page calls nothing else. The built page lives in dashboard/dist (built by `npm ci` / `npm start`, see
 * dashboard/README.md); it is read once, on its first request, and served from memory.
 */
import { HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, extname, join, relative, sep } from "node:path"
import { fileURLToPath } from "node:url"
import { gzipSync } from "node:zlib"
import { errorResponse, unknownRoute } from "./errors.ts"
import { pathOf } from "./path.ts"

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
  const path = pathOf(req.url)
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

export const dashboardRoutes = HttpRouter.empty.pipe(HttpRouter.get("/dashboard", serveStatic), HttpRouter.get("/dashboard/*", serveStatic))
