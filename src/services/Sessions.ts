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
 */
import { Clock, Effect } from "effect"
import { createHash, randomBytes, timingSafeEqual } from "node:crypto"
import { Settings } from "../domain/config.ts"
import { AdminForbidden, AdminUnauthorized, InvalidApiKey } from "../domain/errors.ts"
import type { Environment } from "../domain/ids.ts"
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

/** Bound on live sessions, so sign-ins cannot grow memory without limit (the oldest are dropped). */
const MAX_SESSIONS = 10_000

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
    const live = new Map<string, Session>()

    /**
     * Check a presented token: a Tollgate project key (`tg_…`) makes a team session, anything else is
     * compared with the admin token (constant time, by Bootstrap). Returns the session id (for the
     * cookie) and the session.
     */
    const signIn = (token: string): Effect.Effect<{ readonly id: string; readonly session: Session }, AdminUnauthorized | InvalidApiKey> =>
      Effect.gen(function* () {
        const viewer: Viewer = token.startsWith("tg_")
          ? yield* Effect.map(keys.authenticate(`Bearer ${token}`), (p): Viewer => ({ role: "team", projectId: p.projectId, environment: p.environment, keyId: p.keyId }))
          : yield* bootstrap.authorizeAdmin(`Bearer ${token}`).pipe(
              Effect.as({ role: "operator" } as const),
              Effect.mapError(() => new AdminUnauthorized({ message: "Wrong admin token. Operators sign in with TOLLGATE_ADMIN_TOKEN, teams with a project key (tg_…)." }))
            )
        const now = yield* Clock.currentTimeMillis
        const id = randomBytes(32).toString("base64url")
        const session: Session = { viewer, csrfToken: randomBytes(32).toString("base64url"), createdAt: now, expiresAt: now + settings.sessionTtlMs }
        for (const [k, s] of live) if (s.expiresAt <= now) live.delete(k)
        while (live.size >= MAX_SESSIONS) live.delete(live.keys().next().value!)
        live.set(digest(id), session)
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
