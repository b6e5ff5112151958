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
 * The batch never runs while an `@effect/sql` transaction (which may span event-loop turns) is open
 * on the connection: it waits for the next turn. A `transact` called from INSIDE such a transaction
 * runs at once, as a savepoint of it, so service methods compose with `sql.withTransaction` callers.
 * A caller waits uninterruptibly once queued: its body will run; it must see the outcome.
 */
import { SqlClient } from "@effect/sql"
import type BetterSqlite3 from "better-sqlite3"
import { Context, Effect } from "effect"

/** Roll the current transaction back and fail the caller with `error`. */
export type Abort<E> = (error: E) => never

export interface SyncTransactions {
  readonly transact: <A, E = never>(body: (abort: Abort<E>) => A) => Effect.Effect<A, E>
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
  /** Queue `body`; `done` is called once, after the batch that ran it committed (or failed). */
  readonly submit: (body: TxBody, done: (outcome: TxOutcome) => void) => void
}

/**
 * The batching core, with no Effect in it: the main thread wraps it in `transact`, the store worker
 * calls it from its message handler. `canBegin` says whether the connection is free for a batch now
 * (the main thread's is not while an @effect/sql transaction is open on it).
 */
export const makeGroupCommit = (db: BetterSqlite3.Database, canBegin: () => boolean = () => true): GroupCommit => {
  // One transaction function: BEGIN IMMEDIATE/COMMIT when alone (the write lock up front, so a batch
  // never fails to upgrade a read lock while another connection writes), SAVEPOINT/RELEASE inside one.
  const txn = db.transaction((body: TxBody) => body(abort))
  const outcomeOf = (body: TxBody): TxOutcome => attempt((b) => txn.immediate(b), body)
  const batchTxn = db.transaction((batch: ReadonlyArray<Queued>) => batch.map((q) => outcomeOf(q.body)))

  let queue: Array<Queued> = []
  let scheduled = false

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
    if (batch.length === 1) return batch[0]!.done(outcomeOf(batch[0]!.body))
    let outcomes: ReadonlyArray<TxOutcome>
    try {
      outcomes = batchTxn.immediate(batch)
    } catch (e) {
      // The COMMIT itself failed: nothing of the batch is on disk.
      const died: TxOutcome = { _tag: "Died", defect: e }
      for (const q of batch) q.done(died)
      return
    }
    batch.forEach((q, i) => q.done(outcomes[i]!))
  }

  const submit = (body: TxBody, done: (outcome: TxOutcome) => void): void => {
    queue.push({ body, done })
    if (scheduled) return
    scheduled = true
    setImmediate(drain)
  }
  return { submit }
}

interface Queued {
  readonly body: TxBody
  readonly done: (outcome: TxOutcome) => void
}

/** An outcome as the Effect its caller resumes with. */
export const outcomeEffect = <A, E>(outcome: TxOutcome): Effect.Effect<A, E> =>
  outcome._tag === "Committed"
    ? Effect.succeed(outcome.value as A)
    : outcome._tag === "Aborted"
      ? Effect.fail(outcome.error as E)
      : Effect.die(outcome.defect)

export const makeSyncTransactions = (db: BetterSqlite3.Database): SyncTransactions => {
  const group = makeGroupCommit(db, () => !db.inTransaction)
  // Inside an open @effect/sql transaction: a savepoint of it, at once.
  const nested = db.transaction((body: TxBody) => body(abort))

  const transact = <A, E = never>(body: (abort: Abort<E>) => A): Effect.Effect<A, E> =>
    Effect.withFiberRuntime<A, E>((fiber) => {
      if (Context.getOption(fiber.currentContext, SqlClient.TransactionConnection)._tag === "Some") {
        return Effect.suspend(() => outcomeEffect<A, E>(attempt(nested, body as TxBody)))
      }
      return Effect.uninterruptible(
        Effect.async<A, E>((resume) => {
          group.submit(body as TxBody, (outcome) => resume(outcomeEffect<A, E>(outcome)))
        })
      )
    })

  return { transact }
}
