/**
 * Synchronous, group-committed transactions on the store's one better-sqlite3 connection: the chat
 * path's two transactions (reservation, settlement) run here as plain functions over prepared
 * statements (≈ 2–5 µs a statement instead of ≈ 40–130 µs through `@effect/sql`, bench/README.md).
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

type Outcome = Effect.Effect<unknown, unknown>

interface Queued {
  readonly body: (abort: Abort<unknown>) => unknown
  readonly resume: (outcome: Outcome) => void
}

export const makeSyncTransactions = (db: BetterSqlite3.Database): SyncTransactions => {
  // One transaction function: BEGIN/COMMIT when alone, SAVEPOINT/RELEASE inside an open transaction.
  const txn = db.transaction((body: (abort: Abort<unknown>) => unknown) => body(abort))
  const outcomeOf = (body: Queued["body"]): Outcome => {
    try {
      return Effect.succeed(txn(body))
    } catch (e) {
      return e instanceof Aborted ? Effect.fail(e.error) : Effect.die(e)
    }
  }
  const batchTxn = db.transaction((batch: ReadonlyArray<Queued>) => batch.map((q) => outcomeOf(q.body)))

  let queue: Array<Queued> = []
  let scheduled = false

  const drain = (): void => {
    scheduled = false
    if (queue.length === 0) return
    // An @effect/sql transaction is open across turns: our BEGIN would nest inside it. Try again
    // shortly (a timer, not the next turn: that transaction may be waiting on a timer itself).
    if (db.inTransaction) {
      scheduled = true
      setTimeout(drain, 1)
      return
    }
    const batch = queue
    queue = []
    if (batch.length === 1) return batch[0]!.resume(outcomeOf(batch[0]!.body))
    let outcomes: ReadonlyArray<Outcome>
    try {
      outcomes = batchTxn(batch)
    } catch (e) {
      // The COMMIT itself failed: nothing of the batch is on disk.
      const died = Effect.die(e)
      for (const q of batch) q.resume(died)
      return
    }
    batch.forEach((q, i) => q.resume(outcomes[i]!))
  }
  const schedule = () => {
    if (scheduled) return
    scheduled = true
    setImmediate(drain)
  }

  const transact = <A, E = never>(body: (abort: Abort<E>) => A): Effect.Effect<A, E> =>
    Effect.withFiberRuntime<A, E>((fiber) => {
      if (Context.getOption(fiber.currentContext, SqlClient.TransactionConnection)._tag === "Some") {
        return Effect.suspend(() => outcomeOf(body as Queued["body"]) as Effect.Effect<A, E>)
      }
      return Effect.uninterruptible(
        Effect.async<A, E>((resume) => {
          queue.push({ body: body as Queued["body"], resume: resume as Queued["resume"] })
          schedule()
        })
      )
    })

  return { transact }
}
