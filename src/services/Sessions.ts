/**
 * Dashboard sign-in sessions (issue 17). An operator signs in with the admin token, a team with one
 * of its project keys; either gets a random session id (sent back only in an HttpOnly, SameSite=Strict
 * cookie) and a CSRF token (returned in the JSON body, kept in the page's memory, sent back in the
 * `X-CSRF-Token` header of every write).
 *
 * Sessions live in this process's memory, keyed by SHA-256 of the id: a restart signs everyone out,
 * and nothing that could be replayed is ever written to the store. A session lasts `sessionTtlMs`
 * from sign-in (absolute, not sliding). A team session is re-checked against its key on every use, so
 * revoking or expiring the key ends the session too.
 *
 * Live sessions are bounded per principal, so that no sign-in can push out another principal's
 * session (issue 38, finding 3: one global cap let 10,050 sign-ins with one project key sign every
 * operator out): see `SessionTable`. A sign-in's credential check is throttled (./AuthThrottle.ts).
 */
import { Clock, Effect } from "effect"
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"
import { Settings } from "../domain/config.ts"
import { AdminForbidden, AdminUnauthorized, InvalidApiKey, type RateLimited } from "../domain/errors.ts"
import type { Environment } from "../domain/ids.ts"
import { AuthThrottle, type Credential, credentialOf } from "./AuthThrottle.ts"
import { Bootstrap } from "./Bootstrap.ts"
import { KeyRegistry } from "./KeyRegistry.ts"

/** Who a signed-in dashboard user is: the operator (everything), or a team (one project and environment, read-only). */
export type Viewer =
  | { readonly role: "operator" }
  | { readonly role: "team"; readonly projectId: string; readonly environment: Environment; readonly keyId: string }

export interface Session {
  readonly viewer: Viewer
  readonly csrfToken: string
  readonly createdAt: number
  readonly expiresAt: number
}

export interface SessionLimits {
  /** Live sessions of one principal (the operator; a team by its key); its oldest goes first. */
  readonly perPrincipal: number
  /** Live team sessions, all keys together; the oldest team session goes first. */
  readonly teamSessions: number
}

/** At most 20 sessions per principal (browsers, tabs that signed in again) and 10,000 team sessions. */
export const SESSION_LIMITS: SessionLimits = { perPrincipal: 20, teamSessions: 10_000 }

/** Whose session it is: the operator is one principal, a team session belongs to the key it signed in with. */
const principalOf = (viewer: Viewer): string => (viewer.role === "operator" ? "operator" : viewer.keyId)

const oldest = <K>(entries: { keys(): IterableIterator<K> }): K => entries.keys().next().value!

/**
 * The live sessions by SHA-256 of their id, bounded so that no sign-in pushes out another principal's
 * session: a principal keeps its `perPrincipal` newest, and team sessions together are at most
 * `teamSessions` (the oldest TEAM session goes). The operator's sessions are outside that budget, so
 * no number of team sign-ins reaches them; and a team, at `perPrincipal` sessions a key, needs
 * `teamSessions / perPrincipal` live keys (500, all issued by the operator) to push out another's.
 * Memory: at most 20 + 10,000 sessions. One TTL for all: insertion order is expiry order, so the
 * expired are swept from the front of each table.
 */
export class SessionTable {
  private readonly operator = new Map<string, Session>()
  private readonly team = new Map<string, Session>()
  private readonly byPrincipal = new Map<string, Set<string>>()
  constructor(private readonly limits: SessionLimits) {}

  add(key: string, session: Session, now: number): void {
    for (const table of [this.operator, this.team]) {
      for (const [k, s] of table) {
        if (s.expiresAt > now) break
        this.delete(k)
      }
    }
    const principal = principalOf(session.viewer)
    const own = this.byPrincipal.get(principal) ?? new Set<string>()
    this.byPrincipal.set(principal, own)
    while (own.size >= this.limits.perPrincipal) this.delete(oldest(own))
    const table = this.tableOf(session.viewer)
    if (table === this.team) while (this.team.size >= this.limits.teamSessions) this.delete(oldest(this.team))
    table.set(key, session)
    own.add(key)
  }

  get(key: string): Session | undefined {
    return this.operator.get(key) ?? this.team.get(key)
  }

  delete(key: string): boolean {
    const session = this.get(key)
    if (session === undefined) return false
    this.tableOf(session.viewer).delete(key)
    const principal = principalOf(session.viewer)
    const own = this.byPrincipal.get(principal)
    own?.delete(key)
    if (own?.size === 0) this.byPrincipal.delete(principal)
    return true
  }

  /** Live sessions now: the operator's, the teams', and how many principals hold them. */
  get size() {
    return { operator: this.operator.size, team: this.team.size, principals: this.byPrincipal.size }
  }

  private tableOf(viewer: Viewer): Map<string, Session> {
    return viewer.role === "operator" ? this.operator : this.team
  }
}

const digest = (s: string): string => createHash("sha256").update(s, "utf8").digest("hex")

const sameText = (a: string, b: string): boolean => {
  const ba = Buffer.from(digest(a), "hex")
  const bb = Buffer.from(digest(b), "hex")
  return timingSafeEqual(ba, bb)
}

const expired = () => new AdminUnauthorized({ message: "Your dashboard session has expired or was signed out. Sign in again." })

export class Sessions extends Effect.Service<Sessions>()("tollgate/Sessions", {
  effect: Effect.gen(function* () {
    const settings = yield* Settings
    const bootstrap = yield* Bootstrap
    const keys = yield* KeyRegistry
    const throttle = yield* AuthThrottle
    const live = new SessionTable(SESSION_LIMITS)

    /** Who a token signs in as: a project key a team, the admin token (compared in constant time, by Bootstrap) the operator. */
    const viewerOf = (token: string, credential: Credential): Effect.Effect<Viewer, AdminUnauthorized | InvalidApiKey> =>
      credential.kind === "project_key"
        ? Effect.map(keys.authenticate(`Bearer ${token}`), (p): Viewer => ({ role: "team", projectId: p.projectId, environment: p.environment, keyId: p.keyId }))
        : bootstrap.authorizeAdmin(`Bearer ${token}`).pipe(
            Effect.as({ role: "operator" } as const),
            Effect.mapError(() => new AdminUnauthorized({ message: "Wrong admin token. Operators sign in with TOLLGATE_ADMIN_TOKEN, teams with a project key (tg_…)." }))
          )

    /**
     * Sign in from `address` (the client's, for the throttle) with a presented token. Returns the
     * session id (for the cookie) and the session; 429 while the address or the credential is throttled.
     */
    const signIn = (token: string, address: string): Effect.Effect<{ readonly id: string; readonly session: Session }, AdminUnauthorized | InvalidApiKey | RateLimited> =>
      Effect.gen(function* () {
        const credential = credentialOf(token)
        const viewer = yield* throttle.guard({ surface: "sign_in", address, credential }, viewerOf(token, credential))
        const now = yield* Clock.currentTimeMillis
        const id = randomBytes(32).toString("base64url")
        const session: Session = { viewer, csrfToken: randomBytes(32).toString("base64url"), createdAt: now, expiresAt: now + settings.sessionTtlMs }
        live.add(digest(id), session, now)
        return { id, session }
      })

    /** The live session of a cookie value, or 401 when unknown, expired, or its team key no longer works. */
    const resume = (id: string | undefined): Effect.Effect<Session, AdminUnauthorized> =>
      Effect.gen(function* () {
        if (id === undefined || id.length === 0) return yield* new AdminUnauthorized({ message: "Sign in first: no dashboard session." })
        const key = digest(id)
        const session = live.get(key)
        const now = yield* Clock.currentTimeMillis
        if (session === undefined) return yield* expired()
        if (session.expiresAt <= now) {
          live.delete(key)
          return yield* expired()
        }
        if (session.viewer.role === "team") {
          const info = yield* Effect.either(keys.info(session.viewer.keyId))
          if (info._tag === "Left" || (info.right.status !== "active" && info.right.status !== "rotated")) {
            live.delete(key)
            return yield* new AdminUnauthorized({ message: "The project key this session signed in with no longer works. Sign in with a current key." })
          }
        }
        return session
      })

    /** A write with a cookie session must carry the session's CSRF token (compared in constant time). */
    const checkCsrf = (session: Session, presented: string | undefined): Effect.Effect<void, AdminForbidden> =>
      presented !== undefined && sameText(presented, session.csrfToken)
        ? Effect.void
        : Effect.fail(new AdminForbidden({ code: "invalid_csrf_token", message: "Missing or wrong X-CSRF-Token header for a cookie-authenticated write. Reload the dashboard." }))

    const signOut = (id: string | undefined) => Effect.sync(() => (id === undefined ? false : live.delete(digest(id))))

    return { signIn, resume, checkCsrf, signOut } as const
  })
}) {}
