/**
 * Recovery sweep (DESIGN.md §4): a hold whose deadline passed belongs to a process that died or hung.
 * At start-up and then every `interval`, void such holds, fail their requests and free their
 * idempotency claims, so a crash never strands budget. Each hold moves at most once (guarded UPDATE).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Schedule } from "effect"
import { IdempotencyStore } from "./IdempotencyStore.ts"
import { Ledger } from "./Ledger.ts"
import { Requests } from "./Requests.ts"

export class Recovery extends Effect.Service<Recovery>()("tollgate/Recovery", {
  scoped: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const ledger = yield* Ledger
    const requests = yield* Requests
    const idempotency = yield* IdempotencyStore

    /** Void every expired hold; returns how many were voided. */
    const sweep = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const expired = yield* ledger.expiredHolds(now)
      let voided = 0
      for (const hold of expired) {
        const moved = yield* sql.withTransaction(
          Effect.gen(function* () {
            const released = yield* ledger.release(hold.id)
            if (!released) return false
            yield* requests.fail(hold.request_id, {
              code: "reservation_expired",
              message: "The gateway did not finish this request before its reservation deadline; nothing was charged.",
              attempts: [],
              completedAt: now
            })
            yield* idempotency.releaseRequests([hold.request_id])
            return true
          })
        ).pipe(Effect.orDie)
        if (moved) voided++
      }
      if (voided > 0) yield* Effect.logWarning(`recovery sweep voided ${voided} expired reservation(s)`)
      return voided
    })

    yield* sweep
    yield* Effect.forkScoped(Effect.repeat(Effect.delay(sweep, Duration.seconds(30)), Schedule.forever))
    return { sweep } as const
  })
}) {}
