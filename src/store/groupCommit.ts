/**
 * Group commit for the embedded SQLite store: durability (WAL, synchronous=FULL) at the price of
 * one fsync per BATCH of transactions instead of one per transaction.
 *
 * better-sqlite3 is synchronous, so every COMMIT with synchronous=FULL blocks the event loop for an
 * fsync (≈ 0.2 ms on an idle disk, several ms on a busy one) and a governed call commits twice
 * (reservation, settlement). Here `withTransaction` enqueues the transaction instead; once per
 * event-loop turn (setImmediate) the queued transactions run inside ONE outer transaction, each in
 * its own SAVEPOINT, and one COMMIT makes them durable together (a batch of one is a plain
 * transaction). The first caller of an idle store leads the batch in its own fiber; transactions that
 * arrive while a batch commits form the next one. Semantics per transaction are unchanged:
 * - atomic: a transaction that fails rolls back to its savepoint; the others in the batch commit;
 * - durable before it returns: a caller resumes only after the batch's COMMIT (so a response never
 *   leaves before its charge is on disk); if the COMMIT fails, every caller in the batch fails;
 * - isolated: the store is one connection, transactions run one after another in enqueue order.
 * A caller waits uninterruptibly once enqueued (its transaction will run; it must see the outcome).
 * Nested `withTransaction` calls (inside a running transaction) keep the plain savepoint behaviour,
 * and the effect runs with the caller's context and Clock (so tests on TestClock still see theirs).
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Context, Deferred, Effect, Exit, FiberRef, Runtime } from "effect"

interface Pending {
  readonly effect: Effect.Effect<unknown, unknown, never>
  readonly context: Context.Context<never>
  readonly clock: Clock.Clock
  readonly done: Deferred.Deferred<unknown, unknown>
}

/** Replace `sql.withTransaction` by its group-committing version (in place: every holder of the client gets it). */
export const installGroupCommit = (sql: SqlClient.SqlClient): Effect.Effect<void> =>
  Effect.gen(function* () {
    const original = sql.withTransaction
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    let queue: Array<Pending> = []
    let scheduled = false
    let running = false

    /** A batch of one is a plain transaction (no savepoint): what an idle gateway pays. */
    const runAlone = (p: Pending) =>
      Effect.flatMap(
        Effect.exit(original(p.effect).pipe(Effect.withClock(p.clock), Effect.locally(FiberRef.currentContext, p.context))),
        (exit) => Deferred.done(p.done, exit)
      )

    const runBatch = (batch: ReadonlyArray<Pending>) =>
      batch.length === 1 ? runAlone(batch[0]!) : original(
        Effect.withFiberRuntime<Array<Exit.Exit<unknown, unknown>>>((fiber) => {
          const tx = Context.unsafeGet(fiber.currentContext, SqlClient.TransactionConnection)
          return Effect.forEach(batch, (p) =>
            Effect.exit(original(p.effect)).pipe(
              Effect.withClock(p.clock),
              Effect.locally(FiberRef.currentContext, Context.add(p.context, SqlClient.TransactionConnection, tx))
            )
          )
        })
      ).pipe(
        Effect.exit,
        Effect.flatMap((outer) =>
          Effect.forEach(batch, (p, i) => Deferred.done(p.done, Exit.isSuccess(outer) ? outer.value[i]! : (outer as Exit.Exit<unknown, unknown>)), { discard: true })
        )
      )

    const drain = (): void => {
      scheduled = false
      if (running || queue.length === 0) return
      const batch = queue
      queue = []
      running = true
      runFork(
        Effect.ensuring(
          runBatch(batch),
          Effect.sync(() => {
            running = false
            if (queue.length > 0) schedule()
          })
        )
      )
    }
    const schedule = () => {
      if (scheduled) return
      scheduled = true
      setImmediate(drain)
    }

    /** Let the rest of this event-loop turn enqueue its transactions before the batch is sealed. */
    const nextTurn = Effect.async<void>((resume) => {
      setImmediate(() => resume(Effect.void))
    })

    const withTransaction = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R> =>
      Effect.withFiberRuntime((fiber) => {
        if (Context.getOption(fiber.currentContext, SqlClient.TransactionConnection)._tag === "Some") return original(effect)
        const done = Deferred.unsafeMake<unknown, unknown>(fiber.id())
        queue.push({
          effect: effect as Effect.Effect<unknown, unknown, never>,
          context: fiber.currentContext as Context.Context<never>,
          clock: Context.get(fiber.currentDefaultServices, Clock.Clock),
          done
        })
        const result = Deferred.await(done) as Effect.Effect<A, E, never>
        if (running || scheduled) return Effect.uninterruptible(result)
        // Nobody is committing: this caller leads the batch in its own fiber (no extra fiber when idle).
        running = true
        return Effect.uninterruptible(
          nextTurn.pipe(
            Effect.zipRight(
              Effect.suspend(() => {
                const batch = queue
                queue = []
                return runBatch(batch)
              })
            ),
            Effect.ensuring(
              Effect.sync(() => {
                running = false
                if (queue.length > 0) schedule()
              })
            ),
            Effect.zipRight(result)
          )
        )
      })

    ;(sql as { withTransaction: SqlClient.SqlClient["withTransaction"] }).withTransaction = withTransaction
  })
