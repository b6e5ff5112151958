/**
 * The PostgreSQL pool, made to live with what the server allows (issue 38, finding 1).
 *
 * node-postgres opens a new connection whenever no idle one is free and the pool is below its size,
 * and fails the waiting statement when the server refuses it. With a role's CONNECTION LIMIT (or the
 * database's, or `max_connections`) below `TOLLGATE_PG_POOL_SIZE`, every call beyond the limit failed
 * although connections it could have waited for were open. So:
 *
 * - at start, the limits that apply to this role are read, and a pool larger than they allow starts at
 *   what they allow (one connection kept for the key-change listener), with a warning that names the
 *   setting;
 * - at run time, a connection the server refuses for a limit (SQLSTATE 53300) lowers the pool's
 *   ceiling to the connections it has, so the next statements queue for one of those instead of
 *   failing (other instances took the rest); after `RAISE_QUIET_MS` without a refusal the ceiling
 *   grows back by one every `RAISE_EVERY_MS` while the pool uses all of it, up to what the limits read
 *   at start allow (checked when a connection is asked for: no loop runs, so a TestClock moved by a
 *   day runs nothing);
 * - a wait for a connection is bounded (`TOLLGATE_PG_ACQUIRE_TIMEOUT_MS`): past it the statement fails,
 *   and the call answers 503 `store_unavailable` (src/store/storeFaults.ts);
 * - `connections.health()` tells GET /readyz whether the store serves: unavailable when the latest
 *   transaction to end gave up (none succeeded since); degraded while failed connections are recent or
 *   the ceiling is below the configured size.
 *
 * The ceiling is the pool's `options.max`, which node-postgres reads each time it decides whether to
 * open a connection (pg-pool's `_isFull`).
 */
import { SqlError } from "@effect/sql"
import { Context, Duration, Effect } from "effect"
import pg from "pg"
import type { StoreHealth } from "./ChatStore.ts"

/** How long without a refusal before the ceiling grows again, and how often it grows by one. */
const RAISE_QUIET_MS = 10_000
const RAISE_EVERY_MS = 2_000
/** A connection that failed in this window makes the store degraded. */
const RECENT_MS = 5_000

/** What the pool and its transactions report, for GET /readyz. */
export interface PgConnections {
  readonly health: () => StoreHealth
  /** A transaction of the store ran to its end (committed or rolled back by the body). */
  readonly succeeded: () => void
  /** An attempt of a transaction failed for the connection's sake (src/store/storeFaults.ts); it may be retried. */
  readonly failed: (reason: string) => void
  /** A transaction gave up past its bound: its call answers 503. */
  readonly gaveUp: (reason: string) => void
}

/**
 * A tracker of the store's outcomes on `now`'s clock, for a pool of `configured` connections whose
 * ceiling `ceiling` reads: unavailable while the latest transaction to end gave up; degraded while
 * failed attempts are recent, or the ceiling is below the configured size.
 */
export const makeConnectionsTracker = (now: () => number, configured: number, ceiling: () => number = () => configured) => {
  let lastSuccessAt = -Infinity
  let lastGiveUp: { at: number; reason: string } | undefined
  let lastFailure: { at: number; reason: string } | undefined
  let lastRefusalAt = -Infinity
  return {
    succeeded: () => void (lastSuccessAt = now()),
    failed: (reason: string) => void (lastFailure = { at: now(), reason }),
    gaveUp: (reason: string) => void (lastGiveUp = { at: now(), reason }),
    /** A connection the server refused for a limit (the pool's ceiling was lowered). */
    refused: (reason: string) => {
      lastRefusalAt = now()
      lastFailure = { at: lastRefusalAt, reason }
    },
    lastRefusalAt: () => lastRefusalAt,
    health: (): StoreHealth => {
      if (lastGiveUp !== undefined && lastGiveUp.at >= lastSuccessAt) {
        return { ok: false, reason: `PostgreSQL is not serving the gateway's transactions: ${lastGiveUp.reason}` }
      }
      const current = ceiling()
      if (lastFailure !== undefined && now() - lastFailure.at < RECENT_MS) {
        return { ok: true, degraded: `connections failed in the last ${RECENT_MS / 1000} s: ${lastFailure.reason}` }
      }
      if (current < configured) {
        return { ok: true, degraded: `the pool runs at ${current} of TOLLGATE_PG_POOL_SIZE=${configured} connections: PostgreSQL's connection limits allow no more` }
      }
      return { ok: true }
    }
  }
}

/**
 * The store's connections' tracker, for the transactions that report to it (src/store/pgChatStore.ts).
 * Its default serves a pool nobody watches (tests that build a bare client).
 */
export class PgConnectionsTracker extends Context.Reference<PgConnectionsTracker>()("tollgate/PgConnections", {
  defaultValue: (): PgConnections => makeConnectionsTracker(() => Date.now(), 1)
}) {}

/**
 * Round trips to PostgreSQL (one `query` of a pooled connection: node-postgres sends each statement,
 * with its parse, bind and execute, in one exchange), and the checkouts they were made in: a
 * transaction is one checkout (its BEGIN and COMMIT included), a plain statement another. Read by
 * /metrics (`tollgate_store_round_trips_total`, `tollgate_store_checkouts_total`); issue 40 counts
 * a governed call's round trips by them.
 */
export const pgRoundTrips = { roundTrips: 0, checkouts: 0 }

/**
 * Clients whose session the server has ended: a statement on them failed with a FATAL error
 * (pg_terminate_backend's 57P01, a shutdown, a lost connection's class 08). The server sends that
 * error a moment before it closes the socket, and node-postgres learns that the client is dead only
 * when the close arrives; released in between, the client went back to the idle list and the next
 * statement to check it out — a governed call's key lookup, say — failed with "Connection terminated
 * unexpectedly" (issue 42's regression: the webhook worker's poll, in flight when the role's
 * connections were terminated, lent its dead connection to a call). Such a client is released with
 * an error, which makes the pool close it instead of lending it again.
 */
const ended = new WeakSet<pg.Client>()

/** A FATAL (or PANIC) error ends the server's session: the connection serves no further statement. */
const endsSession = (err: unknown) => {
  const severity = (err as { severity?: unknown } | null | undefined)?.severity
  return severity === "FATAL" || severity === "PANIC"
}

/** node-postgres's client, counting its round trips, and marking itself ended on a FATAL error. */
class CountingClient extends pg.Client {
  override query(...args: Array<any>): any {
    pgRoundTrips.roundTrips++
    const last = args.length - 1
    const callback = args[last]
    if (typeof callback === "function") {
      args[last] = (err: unknown, result: unknown) => {
        if (endsSession(err)) ended.add(this)
        callback(err, result)
      }
    }
    const answer = (super.query as (...a: Array<any>) => any)(...args)
    if (typeof callback === "function" || typeof answer?.then !== "function") return answer
    return (answer as Promise<unknown>).catch((err: unknown) => {
      if (endsSession(err)) ended.add(this)
      throw err
    })
  }
}

/** A checked-out client's release: a client whose session ended leaves the pool, with why. */
const releaseOf = (client: pg.PoolClient, release: (err?: Error | boolean) => void) => (err?: Error | boolean) =>
  release(err !== undefined && err !== false ? err : ended.has(client) ? new Error("the server ended this connection's session") : err)

/** A refusal for a limit: too many connections for the role, the database or the server. */
const refusedForLimit = (err: unknown) => (err as { code?: unknown } | undefined)?.code === "53300"

/** What PostgreSQL allows this role at most, from its role, its database and the server (null: no limit found). */
const allowanceQuery = `SELECT
    (SELECT rolconnlimit FROM pg_roles WHERE rolname = current_user) AS role_limit,
    (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) AS superuser,
    (SELECT datconnlimit FROM pg_database WHERE datname = current_database()) AS database_limit,
    current_setting('max_connections')::int AS max_connections,
    current_setting('superuser_reserved_connections')::int AS reserved`

interface Allowance {
  readonly connections: number
  readonly source: string
}

const allowanceOf = (r: { role_limit: number; superuser: boolean; database_limit: number; max_connections: number; reserved: number }): Allowance => {
  const limits: Array<Allowance> = [{ connections: r.superuser ? r.max_connections : r.max_connections - r.reserved, source: "the server's max_connections" }]
  if (r.role_limit >= 0) limits.push({ connections: r.role_limit, source: "the role's CONNECTION LIMIT" })
  if (r.database_limit >= 0) limits.push({ connections: r.database_limit, source: "the database's CONNECTION LIMIT" })
  return limits.reduce((a, b) => (b.connections < a.connections ? b : a))
}

/** Where DATABASE_URL points, without credentials, for messages. */
export const describeUrl = (url: string): string => {
  try {
    const u = new URL(url)
    return `${u.username ? `${decodeURIComponent(u.username)}@` : ""}${u.host}${u.pathname}`
  } catch {
    return "DATABASE_URL"
  }
}

/** Why the gateway cannot start on this database, in an operator's words, with the setting to change. */
export const startFailure = (url: string, cause: unknown): Error => {
  const e = cause as { code?: unknown; message?: unknown }
  const detail = typeof e?.message === "string" ? e.message : String(cause)
  const hint =
    e?.code === "53300"
      ? "PostgreSQL allows this role, database or server no more connections: lower TOLLGATE_PG_POOL_SIZE on every instance, or raise the CONNECTION LIMIT (ALTER ROLE … CONNECTION LIMIT n) or max_connections"
      : e?.code === "28P01" || e?.code === "28000"
        ? "the credentials in DATABASE_URL were refused"
        : e?.code === "3D000"
          ? "the database named in DATABASE_URL does not exist"
          : "check DATABASE_URL and that PostgreSQL is running (scripts/services.sh starts a local one)"
  return new Error(`PostgreSQL at ${describeUrl(url)} refused the gateway's connection: ${detail}${typeof e?.code === "string" ? ` (SQLSTATE ${e.code})` : ""}. ${hint}.`)
}

export interface PoolOptions {
  readonly url: string
  readonly size: number
  readonly acquireTimeoutMs: number
  readonly applicationName: string
  readonly types: pg.CustomTypesConfig
}

/**
 * Open the pool (scoped: ended with its scope), check that a connection is had, and fit its ceiling
 * to what the server allows this role. Fails with `startFailure`'s message when no connection is had.
 */
export const openPool = (options: PoolOptions) =>
  Effect.gen(function* () {
    const clock = yield* Effect.clock
    const now = () => clock.unsafeCurrentTimeMillis()
    let pool: pg.Pool | undefined = undefined
    const tracker = makeConnectionsTracker(now, options.size, () => pool?.options.max ?? options.size)
    const onRefused = (p: pg.Pool, err: Error) => {
      // The refused connection has left the pool's count: the ceiling is the connections it has.
      p.options.max = Math.max(1, Math.min(p.options.max ?? options.size, p.totalCount))
      tracker.refused(err.message)
    }
    // The ceiling grows back, one connection every RAISE_EVERY_MS while the pool uses all of it, once
    // refusals have stopped: checked when a connection is asked for (no loop runs meanwhile).
    let grown = options.size
    let lastRaiseAt = -Infinity
    const growBack = (p: pg.Pool) => {
      const max = p.options.max ?? options.size
      const t = now()
      if (max < grown && p.totalCount >= max && t - tracker.lastRefusalAt() >= RAISE_QUIET_MS && t - lastRaiseAt >= RAISE_EVERY_MS) {
        p.options.max = max + 1
        lastRaiseAt = t
      }
    }
    /**
     * node-postgres's pool, where a connection the server refuses for a limit lowers the ceiling and
     * the statement that asked for it asks again — now waiting for one of the connections the pool
     * has — until the acquire bound has passed. Asking again is always safe: nothing ran.
     */
    class YieldingPool extends pg.Pool {
      override connect(): Promise<pg.PoolClient>
      override connect(callback: (err: Error | undefined, client: pg.PoolClient | undefined, done: (release?: any) => void) => void): void
      override connect(callback?: (err: Error | undefined, client: pg.PoolClient | undefined, done: (release?: any) => void) => void): Promise<pg.PoolClient> | void {
        if (callback === undefined) return super.connect()
        pgRoundTrips.checkouts++
        growBack(this)
        const started = now()
        const ask = (): void =>
          super.connect((err, client, done) => {
            if (err !== undefined && err !== null && refusedForLimit(err)) {
              onRefused(this, err)
              if (now() - started < options.acquireTimeoutMs) return void setTimeout(ask, 5 + Math.random() * 20)
            }
            if (client === undefined) return callback(err, client, done)
            // Both ways of handing the client back (its release, and the callback's done) go through releaseOf.
            const release = releaseOf(client, client.release.bind(client))
            client.release = release
            callback(err, client, release)
          })
        ask()
      }
    }
    pool = yield* Effect.acquireRelease(
      Effect.sync(
        () =>
          new YieldingPool({
            connectionString: options.url,
            max: options.size,
            connectionTimeoutMillis: options.acquireTimeoutMs,
            application_name: options.applicationName,
            types: options.types,
            Client: CountingClient as unknown as typeof pg.Client
          })
      ),
      (p) => Effect.promise(() => p.end()).pipe(Effect.timeoutOption(Duration.seconds(1)))
    )
    // Errors of idle clients (a dropped connection) are node-postgres's to clean up; without a
    // listener it would throw them.
    pool.on("error", () => {})
    const first = yield* Effect.tryPromise({
      try: () => pool!.query(allowanceQuery),
      catch: (cause) => new SqlError.SqlError({ cause, message: startFailure(options.url, cause).message })
    })
    const allowance = allowanceOf(first.rows[0])
    // One connection of the allowance is the key-change listener's (src/store/keyEvents.ts).
    const fits = Math.max(1, allowance.connections - 1)
    // The ceiling never grows past what the limits read at start allow (raising them needs a restart).
    grown = Math.min(options.size, fits)
    if (fits < options.size) {
      pool.options.max = fits
      yield* Effect.logWarning(
        `TOLLGATE_PG_POOL_SIZE=${options.size} is more than ${allowance.source} (${allowance.connections}) allows: the pool starts at ${fits} connection(s) and grows only when PostgreSQL accepts more. Lower TOLLGATE_PG_POOL_SIZE (across all instances) or raise the limit.`
      )
    }
    return { pool, connections: tracker as PgConnections }
  })
