/**
 * Who may call the admin API, and how (issue 17):
 * - `Authorization: Bearer <admin token>`: the operator, as before (CLI, scripts). No cookie involved.
 * - the dashboard's session cookie: the operator or a team (one project and environment, read-only).
 *   Every write with a cookie must carry the session's `X-CSRF-Token`; a team session writes nothing.
 * A team asking for another project's data gets the same 404 as for an unknown id.
 * A presented admin token is throttled per client address and for all addresses together (429 before
 * it is checked, ../services/AuthThrottle.ts); who the client is, `clientOf` says.
 */
import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Effect } from "effect"
import { BlockList, isIP } from "node:net"
import { Settings } from "../domain/config.ts"
import { AdminForbidden, AdminNotFound, type AdminUnauthorized, InvalidRequest, type RateLimited } from "../domain/errors.ts"
import { AuthThrottle } from "../services/AuthThrottle.ts"
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

/** What the admin check (`adminCaller`) needs. */
export type AdminCheckServices = Bootstrap | Sessions | AuthThrottle | Settings

/**
 * The caller of an admin endpoint (the `AdminAuth` middleware): the bearer admin token wins;
 * otherwise the session cookie (with CSRF on writes). A presented token is a guess at the admin token
 * until checked: throttled (429) before the check once its address or all addresses failed too often.
 * No Authorization header is no guess: a plain 401, not counted.
 */
export const adminCaller = (req: HttpServerRequest.HttpServerRequest): Effect.Effect<Caller, AdminUnauthorized | AdminForbidden | RateLimited, AdminCheckServices> =>
  Effect.gen(function* () {
    const authorization = header(req, "authorization")
    if (authorization === undefined && req.cookies[SESSION_COOKIE] !== undefined) return yield* sessionCaller(req)
    const check = (yield* Bootstrap).authorizeAdmin(authorization)
    if (authorization === undefined) yield* check
    else yield* (yield* AuthThrottle).guard({ surface: "admin_token", address: (yield* clientOf(req)).address, credential: { kind: "admin_token" } }, check)
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

/** Who is on the other end of a request: the client's address, and whether it reached us over HTTPS. */
export interface Client {
  readonly address: string
  readonly https: boolean
}

/** The trusted proxies as a BlockList, built once per settings list. */
const trustedBlocks = new WeakMap<ReadonlyArray<string>, BlockList>()
const blockListOf = (proxies: ReadonlyArray<string>): BlockList => {
  let blocks = trustedBlocks.get(proxies)
  if (blocks === undefined) {
    blocks = new BlockList()
    for (const entry of proxies) {
      const [ip = "", bits] = entry.split("/")
      const family = isIP(ip) === 6 ? "ipv6" : "ipv4"
      if (bits === undefined) blocks.addAddress(ip, family)
      else blocks.addSubnet(ip, Number(bits), family)
    }
    trustedBlocks.set(proxies, blocks)
  }
  return blocks
}

/**
 * The client of a request (issue 38). The socket's peer is the client, unless the peer is a trusted
 * proxy (TOLLGATE_TRUSTED_PROXIES; default loopback). Then:
 * - the address: X-Forwarded-For read from the right, past every trusted hop; the first address no
 *   trusted proxy vouches for is the client (what a client writes into the header itself sits left of
 *   it, so it cannot pose as another address). All hops trusted: the left-most. A hop that is not an
 *   IP address ends the walk at the proxy that passed it on.
 * - HTTPS: when any hop of X-Forwarded-Proto says `https` (`https, http`: TLS at the edge, plain
 *   between proxies). Forging `https` only makes the forger's own cookie Secure; a forged `http`
 *   beside a proxy's `https` cannot take Secure away.
 * Any other peer's forwarded headers are ignored; a TLS socket is HTTPS whoever the peer.
 */
export const clientOf = (req: HttpServerRequest.HttpServerRequest): Effect.Effect<Client, never, Settings> =>
  Effect.map(Settings, (settings) => {
    const socket = NodeHttpServerRequest.toIncomingMessage(req).socket as { readonly remoteAddress?: string; readonly encrypted?: boolean }
    const tls = socket.encrypted === true
    const peer = socket.remoteAddress ?? "unknown"
    const blocks = blockListOf(settings.trustedProxies)
    const trusted = (address: string) => {
      const family = isIP(address)
      return family !== 0 && blocks.check(address, family === 6 ? "ipv6" : "ipv4")
    }
    if (!trusted(peer)) return { address: peer, https: tls }
    let address = peer
    for (const hop of (header(req, "x-forwarded-for") ?? "").split(",").map((h) => h.trim()).filter((h) => h !== "").reverse()) {
      if (isIP(hop) === 0) break
      address = hop
      if (!trusted(hop)) break
    }
    const forwardedHttps = (header(req, "x-forwarded-proto") ?? "").split(",").some((p) => p.trim().toLowerCase() === "https")
    return { address, https: tls || forwardedHttps }
  })

/** Cookie attributes: HttpOnly, SameSite=Strict, whole origin; Secure when the client came over HTTPS (`clientOf`). */
export const cookieOptions = (client: Client, maxAgeMs?: number) => ({
  httpOnly: true,
  sameSite: "strict" as const,
  path: "/",
  secure: client.https,
  ...(maxAgeMs === undefined ? {} : { maxAge: `${Math.floor(maxAgeMs / 1000)} seconds` as const })
})

export const noStore = { "cache-control": "no-store" }

export const json = (body: unknown, status = 200) => HttpServerResponse.unsafeJson(body, { status, headers: noStore })
