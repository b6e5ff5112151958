/**
 * The store's share for background work (issue 42): the webhook worker's claims and outcomes, the
 * key-expiry sweep and the budget.exhausted writer run their statements one at a time through this
 * lane, so together they hold at most one of the pool's connections. However many deliveries finish
 * at once, or however long the store makes one of those statements wait (a lock, a slow disk), the
 * governed calls keep the rest of the pool. Background work waits its turn here, in the process, not
 * in the pool's queue in front of the calls.
 */
import { Effect } from "effect"

export class BackgroundLane extends Effect.Service<BackgroundLane>()("tollgate/BackgroundLane", {
  effect: Effect.map(Effect.makeSemaphore(1), (permit) => ({
    /** Run `statement` (one statement or a short transaction of the store) when the lane is free. */
    run: <A, E, R>(statement: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => permit.withPermits(1)(statement)
  }))
}) {}
