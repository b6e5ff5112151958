/**
 * Instance epochs and progress marks (docs/contract.md §4; migration 0004): the statements that let a
 * restarted process resolve at once what a dead one left in flight, instead of waiting for the
 * holds' deadlines.
 *
 * - Every process that opens the store takes a new epoch: a row of `instances` with its stable
 *   instance id (TOLLGATE_INSTANCE_ID) and a heartbeat it refreshes while it lives.
 * - A hold and its idempotency claim carry the epoch of the process that made them (written in the
 *   reservation transaction).
 * - An open stream's hold carries a progress mark its heartbeat writes: the route and rate card that
 *   serve it and the tokens delivered so far, so a hold of a dead epoch is charged for what the
 *   client received.
 *
 * Which epochs are dead is a rule of the recovery (src/services/Recovery.ts); these only read and write.
 */
import type BetterSqlite3 from "better-sqlite3"
import type { TokenCounts } from "../../spec/pricing.ts"

/** What a stream delivered so far, durable: charged if its process dies before it settles. */
export interface ProgressMark {
  readonly route: string
  readonly rateCardVersion: string
  readonly tokens: TokenCounts
  /** When the heartbeat wrote it (ms UTC). */
  readonly at: number
}

/** A hold still `held` by an epoch the caller considers dead, with what resolving it needs. */
export interface OrphanHold {
  readonly id: string
  readonly request_id: string
  readonly project_id: string
  readonly period: string
  readonly amount: number
  readonly deadline: number
  readonly epoch: number
  readonly progress: string | null
  readonly environment: string
  readonly endpoint: string
  readonly model: string
  readonly stream: number
  readonly idempotency_key: string | null
  readonly organization: string
  /** The scopes the hold is in besides its project (migration 0014): its receipt names them. */
  readonly key_id: string | null
  readonly end_user: string | null
}

/** The epoch statements a governed call's transactions use (main thread or store worker). */
export const makeEpochWrites = (db: BetterSqlite3.Database) => {
  const writeProgress = db.prepare<[string, string]>("UPDATE reservations SET progress = ? WHERE id = ? AND state = 'held'")
  const beat = db.prepare<[number, number]>("UPDATE instances SET heartbeat_at = ? WHERE epoch = ?")

  /** The heartbeat: this epoch is alive, and its open streams delivered this much so far. */
  const heartbeatSync = (epoch: number, now: number, marks: ReadonlyArray<{ readonly reservationId: string; readonly mark: ProgressMark }>): void => {
    beat.run(now, epoch)
    for (const m of marks) writeProgress.run(JSON.stringify(m.mark), m.reservationId)
  }

  return { heartbeatSync } as const
}

/** The epoch statements of the start-up and the recovery (main thread). */
export const makeEpochReads = (db: BetterSqlite3.Database) => {
  const insertInstance = db.prepare<[string, number, number], { epoch: number }>(
    "INSERT INTO instances (instance_id, started_at, heartbeat_at) VALUES (?, ?, ?) RETURNING epoch"
  )
  const stopInstance = db.prepare<[number, number]>("UPDATE instances SET stopped_at = ? WHERE epoch = ?")
  // Epochs that still hold something, and whether each is known dead: read over the held holds only
  // (the partial index of holds in state 'held'), never over the whole history of instances.
  const epochsHolding = db.prepare<[], { epoch: number; instance_id: string; heartbeat_at: number; stopped_at: number | null }>(
    `SELECT i.epoch, i.instance_id, i.heartbeat_at, i.stopped_at FROM instances i
     WHERE i.epoch IN (SELECT DISTINCT epoch FROM reservations WHERE state = 'held' AND epoch IS NOT NULL)
        OR i.epoch IN (SELECT DISTINCT epoch FROM idempotency WHERE state = 'in_flight' AND epoch IS NOT NULL)`
  )
  const heldOf = db.prepare<[number], OrphanHold>(
    `SELECT r.id, r.request_id, r.project_id, r.period, r.amount, r.deadline, r.epoch, r.progress,
            q.environment, q.endpoint, q.model, q.stream, q.idempotency_key, p.organization, r.key_id, r.end_user
     FROM reservations r JOIN requests q ON q.id = r.request_id JOIN projects p ON p.id = r.project_id
     WHERE r.state = 'held' AND r.epoch = ?`
  )
  const dropClaims = db.prepare<[number]>("DELETE FROM idempotency WHERE state = 'in_flight' AND epoch = ?")
  const stateOf = db.prepare<[string], { state: string }>("SELECT state FROM reservations WHERE id = ?")
  const pricesOf = db.prepare<[string], { prices: string }>("SELECT prices FROM rate_cards WHERE version = ?")

  return {
    /** Take a new epoch for this process. */
    registerSync: (instanceId: string, now: number): number => insertInstance.get(instanceId, now, now)!.epoch,
    /** A clean shutdown: this epoch holds nothing any more. */
    stopSync: (epoch: number, now: number): void => void stopInstance.run(now, epoch),
    epochsHoldingSync: () => epochsHolding.all(),
    heldOfSync: (epoch: number) => heldOf.all(epoch),
    /** Free the in-flight claims an epoch left without a hold (none should exist: a claim and its hold commit together). */
    dropClaimsSync: (epoch: number): number => dropClaims.run(epoch).changes,
    /** Inside a transaction: whether the hold is still held (nothing resolved it meanwhile). */
    isHeldSync: (reservationId: string): boolean => stateOf.get(reservationId)?.state === "held",
    /** A stored rate card's prices by route (rate cards are immutable once stored). */
    pricesOfSync: (version: string): Record<string, unknown> | undefined => {
      const row = pricesOf.get(version)
      return row === undefined ? undefined : (JSON.parse(row.prices) as Record<string, unknown>)
    }
  } as const
}

