/**
 * Recovery sweep (DESIGN.md §4): a hold whose deadline passed belongs to a process that died or hung.
 * At start-up and then every `interval`, void such holds, fail their requests and free their
 * idempotency claims, so a crash never strands budget. Each hold moves at most once (guarded UPDATE).
 */
import { Clock, Duration, Effect, Schedule } from "effect"
import { ChatStore } from "../store/ChatStore.ts"

/** What the request row of a hold voided by the sweep says. */
export const EXPIRED_FAILURE = {
  code: "reservation_expired",
  message: "The gateway did not finish this request before its reservation deadline; nothing was charged."
} as const

export class Recovery extends Effect.Service<Recovery>()("tollgate/Recovery", {
  scoped: Effect.gen(function* () {
    const store = yield* ChatStore

    /** Void every expired hold (one transaction of the store port); returns how many were voided. */
    const sweep = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const voided = yield* store.expire({ now, failure: EXPIRED_FAILURE })
      if (voided > 0) yield* Effect.logWarning(`recovery sweep voided ${voided} expired reservation(s)`)
      return voided
    })

    yield* sweep
    yield* Effect.forkScoped(Effect.repeat(Effect.delay(sweep, Duration.seconds(30)), Schedule.forever))
    return { sweep } as const
  })
}) {}
