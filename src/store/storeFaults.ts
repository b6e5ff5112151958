/**
 * When the database, not the request, is why a statement failed (issue 38, finding 1): PostgreSQL
 * refusing a connection (a role's or database's CONNECTION LIMIT, `max_connections`, a server starting
 * or shutting down), dropping one (`pg_terminate_backend`, a restart, the network), or no connection
 * coming free within the bound. Such a failure is the store's, answered 503 `store_unavailable` with
 * Retry-After (src/domain/errors.ts `StoreUnavailable`), never 500.
 *
 * `faultOf` reads a failure from @effect/sql-pg (a `SqlError` whose cause is node-postgres's error):
 * - `before`: no connection was had, so nothing of the transaction ran (the message
 *   "Failed to acquire connection…" is @effect/sql-pg's for a failed `pool.connect`): always safe to
 *   run again;
 * - `during`: the connection was lost while statements, or the COMMIT, were on their way: whether the
 *   transaction committed is unknown, so only a transaction that recognizes its own earlier commit
 *   may run again, and a reservation's caller voids what it may have taken.
 */
import { Cause, Option } from "effect"
import { StoreUnavailable } from "../domain/errors.ts"

export type StoreFault = { readonly when: "before" | "during"; readonly reason: string }

/**
 * SQLSTATEs of a connection refused or ended by the server: too_many_connections (a role's, a
 * database's or the server's limit), admin_shutdown (pg_terminate_backend), crash_shutdown,
 * cannot_connect_now (starting up), and class 08 (connection exception).
 */
const CONNECTION_STATES = new Set(["53300", "57P01", "57P02", "57P03", "08000", "08001", "08003", "08004", "08006"])

/** Socket-level failures of the connection itself. */
const SOCKET_CODES = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "ETIMEDOUT", "EHOSTUNREACH", "ENOTFOUND", "EAI_AGAIN"])

/** node-postgres's own words for a connection that ended or never came (no SQLSTATE on these). */
const CONNECTION_WORDS = /Connection terminated|timeout exceeded when trying to connect|connection timeout|Client has encountered a connection error|Client was closed|Connection closed|not queryable/i

const causeOf = (e: { readonly cause?: unknown }) => e.cause as { readonly code?: unknown; readonly message?: unknown } | undefined

/** The store fault a failure is, or undefined when it is not about the connection. */
export const faultOf = (e: unknown): StoreFault | undefined => {
  if (typeof e !== "object" || e === null || (e as { _tag?: unknown })._tag !== "SqlError") return undefined
  const message = String((e as { message?: unknown }).message ?? "")
  const cause = causeOf(e as { cause?: unknown })
  const code = typeof cause?.code === "string" ? cause.code : undefined
  const text = typeof cause?.message === "string" ? cause.message : ""
  const connectionLevel = (code !== undefined && (CONNECTION_STATES.has(code) || SOCKET_CODES.has(code))) || CONNECTION_WORDS.test(text)
  if (message.startsWith("Failed to acquire connection")) return { when: "before", reason: text || message }
  return connectionLevel ? { when: "during", reason: text } : undefined
}

/** How soon a client may try again (Retry-After) after the store refused. */
export const STORE_RETRY_AFTER_MS = 1000

/** The answer for a call the store could not serve: 503, nothing held, retry with the same key. */
export const storeUnavailable = (reason: string): StoreUnavailable =>
  new StoreUnavailable({
    message: `The gateway's database is not accepting its connections right now (${reason}). Nothing is held for this call; retry with the same idempotency key.`,
    retryAfterMs: STORE_RETRY_AFTER_MS
  })

/**
 * The `StoreUnavailable` a defect is, if it is one: raised by the store's transactions as such, or a
 * connection-level `SqlError` from a statement outside them (an admin read). For the catch-alls.
 */
export const storeUnavailableIn = (cause: Cause.Cause<unknown>): StoreUnavailable | undefined => {
  for (const defect of Cause.defects(cause)) {
    if (defect instanceof StoreUnavailable) return defect
    const fault = faultOf(defect)
    if (fault !== undefined) return storeUnavailable(fault.reason)
  }
  const failure = Cause.failureOption(cause)
  const fault = Option.isSome(failure) ? faultOf(failure.value) : undefined
  return fault === undefined ? undefined : storeUnavailable(fault.reason)
}
