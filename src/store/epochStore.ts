/**
 * The epoch statements (src/store/epochs.ts) on the store DATABASE_URL names, for the start-up
 * (src/services/Instance.ts), the recovery (src/services/Recovery.ts) and the shared rate limit's
 * count of live instances (src/services/RateLimiter.ts). Kept apart from epochs.ts, which the store
 * worker loads.
 */
import { SqlClient, type SqlError } from "@effect/sql"
import type BetterSqlite3 from "better-sqlite3"
import { Effect, Option } from "effect"
import { type EpochFacts, oldestLiveHeartbeat } from "../../spec/epochs.ts"
import { Sqlite } from "./Database.ts"
import { makeEpochReads, type OrphanHold } from "./epochs.ts"
import type { SyncTransactions } from "./syncTransactions.ts"

/** An epoch's row. */
interface EpochRow {
  readonly epoch: number
  readonly instance_id: string
  readonly heartbeat_at: number
  readonly stopped_at: number | null
}

const factsOf = (r: EpochRow): EpochFacts => ({ epoch: Number(r.epoch), instanceId: r.instance_id, heartbeatAt: r.heartbeat_at, stoppedAt: r.stopped_at })

/**
 * The start-up's and the recovery's epoch statements on either engine: SQLite through the `Sqlite`
 * connection's synchronous transactions (`makeEpochReads`), PostgreSQL through `SqlClient` (the
 * same statements; BIGSERIAL epochs).
 */
export interface EpochStoreApi {
  /** Take a new epoch for this process. */
  readonly register: (instanceId: string, now: number) => Effect.Effect<number>
  /** A clean shutdown: this epoch holds nothing any more. */
  readonly stop: (epoch: number, now: number) => Effect.Effect<void>
  /** The epochs that still hold something, with what tells whether each is dead (spec/epochs.ts `isDeadEpoch`). */
  readonly epochsHolding: () => Effect.Effect<ReadonlyArray<EpochFacts>>
  readonly heldOf: (epoch: number) => Effect.Effect<ReadonlyArray<OrphanHold>>
  /** Free the in-flight claims an epoch left without a hold. */
  readonly dropClaims: (epoch: number) => Effect.Effect<number>
  /** A stored rate card's prices by route (rate cards are immutable once stored). */
  readonly pricesOf: (version: string) => Effect.Effect<Record<string, unknown> | undefined>
  /** Epochs alive at `now` (spec/epochs.ts `isLiveEpoch`): how many instances share the store. */
  readonly liveCount: (now: number, staleMs: number) => Effect.Effect<number>
}

const pgEpochStore = (sql: SqlClient.SqlClient): EpochStoreApi => {
  const orDie = <A>(e: Effect.Effect<A, SqlError.SqlError>): Effect.Effect<A> => Effect.orDie(e)
  return {
    register: (instanceId, now) =>
      orDie(
        Effect.map(
          sql<{ epoch: number }>`INSERT INTO instances (instance_id, started_at, heartbeat_at) VALUES (${instanceId}, ${now}, ${now}) RETURNING epoch`,
          (rows) => Number(rows[0]!.epoch)
        )
      ),
    stop: (epoch, now) => orDie(Effect.asVoid(sql`UPDATE instances SET stopped_at = ${now} WHERE epoch = ${epoch}`)),
    epochsHolding: () =>
      orDie(
        Effect.map(
          sql<EpochRow>`SELECT i.epoch, i.instance_id, i.heartbeat_at, i.stopped_at FROM instances i
            WHERE i.epoch IN (SELECT DISTINCT epoch FROM reservations WHERE state = 'held' AND epoch IS NOT NULL)
               OR i.epoch IN (SELECT DISTINCT epoch FROM idempotency WHERE state = 'in_flight' AND epoch IS NOT NULL)`,
          (rows) => rows.map(factsOf)
        )
      ),
    heldOf: (epoch) =>
      orDie(sql<OrphanHold>`SELECT r.id, r.request_id, r.project_id, r.period, r.amount, r.deadline, r.epoch, r.progress,
            q.environment, q.endpoint, q.model, q.stream, q.idempotency_key, p.organization, r.key_id, r.end_user
        FROM reservations r JOIN requests q ON q.id = r.request_id JOIN projects p ON p.id = r.project_id
        WHERE r.state = 'held' AND r.epoch = ${epoch}`),
    dropClaims: (epoch) =>
      orDie(Effect.map(sql`DELETE FROM idempotency WHERE state = 'in_flight' AND epoch = ${epoch} RETURNING 1 AS one`, (rows) => rows.length)),
    pricesOf: (version) =>
      orDie(
        Effect.map(sql<{ prices: string }>`SELECT prices FROM rate_cards WHERE version = ${version}`, ([row]) =>
          row === undefined ? undefined : (JSON.parse(row.prices) as Record<string, unknown>)
        )
      ),
    liveCount: (now, staleMs) =>
      orDie(
        Effect.map(
          sql<{ n: number }>`SELECT COUNT(*) AS n FROM instances WHERE stopped_at IS NULL AND heartbeat_at >= ${oldestLiveHeartbeat(now, staleMs)}`,
          ([row]) => Number(row?.n ?? 0)
        )
      )
  }
}

const sqliteEpochStore = (sqlite: SyncTransactions & { readonly db: BetterSqlite3.Database }): EpochStoreApi => {
  const { db, transact } = sqlite
  const reads = makeEpochReads(db)
  const live = db.prepare<[number], { n: number }>("SELECT COUNT(*) AS n FROM instances WHERE stopped_at IS NULL AND heartbeat_at >= ?")
  return {
    register: (instanceId, now) => transact(() => reads.registerSync(instanceId, now), true),
    stop: (epoch, now) => transact(() => reads.stopSync(epoch, now), true),
    epochsHolding: () => Effect.sync(() => reads.epochsHoldingSync().map(factsOf)),
    heldOf: (epoch) => Effect.sync(() => reads.heldOfSync(epoch)),
    dropClaims: (epoch) => transact(() => reads.dropClaimsSync(epoch)),
    pricesOf: (version) => Effect.sync(() => reads.pricesOfSync(version)),
    liveCount: (now, staleMs) => Effect.sync(() => live.get(oldestLiveHeartbeat(now, staleMs))?.n ?? 0)
  }
}

/** The epoch statements of the store this process opened: SQLite when the `Sqlite` connection is there, else `SqlClient` (PostgreSQL). */
export const makeEpochStore: Effect.Effect<EpochStoreApi, never, SqlClient.SqlClient> = Effect.gen(function* () {
  const sqlite = yield* Effect.serviceOption(Sqlite)
  if (Option.isSome(sqlite)) return sqliteEpochStore(sqlite.value)
  return pgEpochStore(yield* SqlClient.SqlClient)
})
