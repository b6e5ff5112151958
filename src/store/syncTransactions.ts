/**
 * Synchronous, group-committed transactions on a better-sqlite3 connection: plain functions over
 * prepared statements (≈ 2–5 µs a statement instead of ≈ 40–130 µs through `@effect/sql`,
 * bench/README.md). `makeGroupCommit` is the core, with no Effect in it: the store worker runs the
 * chat path's transactions with it (src/store/storeWorker.ts); `transact` wraps it for the main
 * thread's connection.
 *
 * `transact(body)` queues `body`; once per event-loop turn the queued bodies run inside ONE outer
 * transaction, each in its own SAVEPOINT, and one COMMIT (one fsync with synchronous=FULL) makes them
 * durable together; a batch of one is a plain transaction. Per transaction nothing changes:
 * - atomic: a body that throws, or calls `abort(e)`, rolls back to its savepoint; the others commit;
 * - durable before it returns: the caller resumes after the batch's COMMIT; if that COMMIT fails,
 *   every caller of the batch fails (a defect: the store is broken, nothing was committed);
 * - isolated: a body runs synchronously, so nothing interleaves with it on the single JS thread.
 * A body queued with `sync: false` may skip the fsync: the unsynced bodies of a turn commit first, as
 * their own batch, with synchronous=NORMAL for that one COMMIT — durable against a crash of the
 * process, and on disk with the next synced COMMIT of the connection (the WAL is one file, appended
 * in order; after a power loss SQLite recovers a prefix of it). Only a transaction whose caller is
 * told nothing that rests on it before a synced one follows may ask for that
 * (src/store/chatTransactions.ts, `mustSync`). The order of a turn's bodies is kept within each batch.
 * The level is back before any caller hears of its outcome; if it cannot be put back, every later
 * batch fails rather than commit at a lower level than it asked for.
 * The batch never runs while an `@effect/sql` transaction (which may span event-loop turns) is open
 * on the connection: it waits for the next turn. A `transact` called from INSIDE such a transaction
 * runs at once, as a savepoint of it, so service methods compose with `sql.withTransaction` callers.
 * A caller waits uninterruptibly once queued: its body will run; it must see the outcome.
 */
import { SqlClient } from "@effect/sql"
import type BetterSqlite3 from "better-sqlite3"
import { Context, Effect, Exit } from "effect"

/** Roll the current transaction back and fail the caller with `error`. */
export type Abort<E> = (error: E) => never

export interface SyncTransactions {
  /** Run `body` in a group-committed transaction; `sync: false` lets its COMMIT skip the fsync (see above). */
  readonly transact: <A, E = never>(body: (abort: Abort<E>) => A, sync?: boolean) => Effect.Effect<A, E>
}

class Aborted {
  constructor(readonly error: unknown) {}
}
const abort: Abort<unknown> = (error) => {
  throw new Aborted(error)
}

/** Run `body` through a better-sqlite3 transaction function; how it ended, as data. */
const attempt = (run: (body: TxBody) => unknown, body: TxBody): TxOutcome => {
  try {
    return { _tag: "Committed", value: run(body) }
  } catch (e) {
    return e instanceof Aborted ? { _tag: "Aborted", error: e.error } : { _tag: "Died", defect: e }
  }
}

/** How a queued body ended: plain data, so it can cross a thread boundary (src/store/storeWorker.ts). */
export type TxOutcome =
  | { readonly _tag: "Committed"; readonly value: unknown }
  | { readonly _tag: "Aborted"; readonly error: unknown }
  | { readonly _tag: "Died"; readonly defect: unknown }

export type TxBody = (abort: Abort<unknown>) => unknown

export interface GroupCommit {
  /**
   * Queue `body`; `done` is called once, after the batch that ran it committed (or failed). With
   * `sync: false` that COMMIT may skip the fsync (synchronous=NORMAL, see above).
   */
  readonly submit: (body: TxBody, done: (outcome: TxOutcome) => void, sync?: boolean) => void
  /**
   * Run the queued bodies now, as the turn's batch would (the store worker calls it once it has read
   * every message already waiting on its port: nothing more can join, so waiting a turn is latency).
   */
  readonly flush: () => void
}

export interface GroupCommitOptions {
  /** Whether the connection is free for a batch now (the main thread's is not while an @effect/sql transaction is open on it). */
  readonly canBegin?: () => boolean
  /** Called after the `done` calls of each committed batch: the store worker sends its replies then, not after the next fsync. */
  readonly afterBatch?: () => void
}

/** SQLite's `synchronous` levels, as `PRAGMA synchronous` reads them. */
const NORMAL = 1

/**
 * The batching core, with no Effect in it: the main thread wraps it in `transact`, the store worker
 * calls it from its message handler.
 */
export const makeGroupCommit = (db: BetterSqlite3.Database, options: GroupCommitOptions = {}): GroupCommit => {
  const canBegin = options.canBegin ?? (() => true)
  const afterBatch = options.afterBatch ?? (() => undefined)
  // One transaction function: BEGIN IMMEDIATE/COMMIT when alone (the write lock up front, so a batch
  // never fails to upgrade a read lock while another connection writes), SAVEPOINT/RELEASE inside one.
  const txn = db.transaction((body: TxBody) => body(abort))
  const outcomeOf = (body: TxBody): TxOutcome => attempt((b) => txn.immediate(b), body)
  const batchTxn = db.transaction((batch: ReadonlyArray<Queued>) => batch.map((q) => outcomeOf(q.body)))
  // The connection's own level (FULL for a file store), read once: an unsynced batch lowers it to
  // NORMAL for its COMMIT and puts it back before anything else can run on the connection.
  // (`exec`, not a prepared statement: SQLite applies this pragma when it compiles it, so a prepared
  // one does nothing on its first run.)
  const level = db.pragma("synchronous", { simple: true }) as number
  const setLevel = (to: number) => () => db.exec(`PRAGMA synchronous = ${to}`)
  const lower = level > NORMAL ? setLevel(NORMAL) : undefined
  const restore = setLevel(level)

  let queue: Array<Queued> = []
  let scheduled = false
  /** Set when the level could not be put back: no batch may commit at a lower level than asked. */
  let stuck: unknown

  const died = (defect: unknown): TxOutcome => ({ _tag: "Died", defect })

  /** Run a batch; how each of its transactions ended (all died when the COMMIT itself failed). */
  const run = (batch: ReadonlyArray<Queued>): ReadonlyArray<TxOutcome> => {
    if (batch.length === 1) return [outcomeOf(batch[0]!.body)]
    try {
      return batchTxn.immediate(batch)
    } catch (e) {
      // The COMMIT itself failed: nothing of the batch is on disk.
      return batch.map(() => died(e))
    }
  }

  /** Run a batch at NORMAL, then put the connection's level back before anyone hears of it. */
  const runUnsynced = (batch: ReadonlyArray<Queued>): ReadonlyArray<TxOutcome> => {
    if (lower === undefined) return run(batch)
    try {
      lower()
    } catch (e) {
      return batch.map(() => died(e))
    }
    const outcomes = run(batch)
    try {
      restore()
    } catch (e) {
      stuck = e
    }
    return outcomes
  }

  // The callers' `done` only resume them (a fiber continues in a microtask, after this turn's
  // batches): nothing runs on the connection between the two batches of a turn.
  const answer = (batch: ReadonlyArray<Queued>, outcomes: ReadonlyArray<TxOutcome>): void => {
    batch.forEach((q, i) => q.done(outcomes[i]!))
    afterBatch()
  }

  const drain = (): void => {
    scheduled = false
    if (queue.length === 0) return
    // A transaction is open across turns: our BEGIN would nest inside it. Try again shortly (a
    // timer, not the next turn: that transaction may be waiting on a timer itself).
    if (!canBegin()) {
      scheduled = true
      setTimeout(drain, 1)
      return
    }
    const batch = queue
    queue = []
    // The unsynced first: their callers go on without waiting for the synced batch's fsync.
    const unsynced = batch.filter((q) => !q.sync)
    const synced = unsynced.length === 0 ? batch : batch.filter((q) => q.sync)
    for (const [group, commit] of [[unsynced, runUnsynced], [synced, run]] as const) {
      if (group.length > 0) answer(group, stuck === undefined ? commit(group) : group.map(() => died(stuck)))
    }
  }

  const submit = (body: TxBody, done: (outcome: TxOutcome) => void, sync = true): void => {
    queue.push({ body, done, sync })
    if (scheduled) return
    scheduled = true
    setImmediate(drain)
  }
  return { submit, flush: drain }
}

interface Queued {
  readonly body: TxBody
  readonly done: (outcome: TxOutcome) => void
  readonly sync: boolean
}

/** How a transaction ended, as an `Exit`: plain data a callback can be told, and an effect to resume with. */
export const outcomeExit = <A, E>(outcome: TxOutcome): Exit.Exit<A, E> =>
  outcome._tag === "Committed"
    ? Exit.succeed(outcome.value as A)
    : outcome._tag === "Aborted"
      ? Exit.fail(outcome.error as E)
      : Exit.die(outcome.defect)

export const makeSyncTransactions = (db: BetterSqlite3.Database): SyncTransactions => {
  const group = makeGroupCommit(db, { canBegin: () => !db.inTransaction })
  // Inside an open @effect/sql transaction: a savepoint of it, at once.
  const nested = db.transaction((body: TxBody) => body(abort))

  const transact = <A, E = never>(body: (abort: Abort<E>) => A, sync = true): Effect.Effect<A, E> =>
    Effect.withFiberRuntime<A, E>((fiber) => {
      if (Context.getOption(fiber.currentContext, SqlClient.TransactionConnection)._tag === "Some") {
        return Effect.suspend(() => outcomeExit<A, E>(attempt(nested, body as TxBody)))
      }
      return Effect.uninterruptible(
        Effect.async<A, E>((resume) => {
          group.submit(body as TxBody, (outcome) => resume(outcomeExit<A, E>(outcome)), sync)
        })
      )
    })

  return { transact }
}
