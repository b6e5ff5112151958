/**
 * Recovery: a hold whose deadline passed belongs to a dead or hung process; the sweep voids it,
 * fails its request and frees its idempotency claim. Fresh holds are left alone.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, TestClock } from "effect"
import { newRequestId, newReservationId } from "../../src/domain/ids.ts"
import { fingerprintOf, IdempotencyStore } from "../../src/services/IdempotencyStore.ts"
import { type Hold, Ledger } from "../../src/services/Ledger.ts"
import { Projects } from "../../src/services/Projects.ts"
import { ReceiptSigner } from "../../src/services/ReceiptSigner.ts"
import { Instance } from "../../src/services/Instance.ts"
import { Recovery } from "../../src/services/Recovery.ts"
import { Requests } from "../../src/services/Requests.ts"
import { newProject, pendingRequest, storeLayer } from "./layers.ts"

const Base = Ledger.Default.pipe(
  Layer.provideMerge(Layer.mergeAll(Projects.Default, ReceiptSigner.Default, Requests.Default, IdempotencyStore.Default, Instance.Default)),
  Layer.provideMerge(storeLayer())
)
const Live = Recovery.Default.pipe(Layer.provideMerge(Base))

const PERIOD = "1970-01"
const FP = fingerprintOf("POST", "/v1/chat/completions", { model: "auto" })

/** What the Gateway does before calling upstream: hold, pending request row, idempotency claim. */
const startRequest = (projectId: string, amount: number, deadline: number, key: string) =>
  Effect.gen(function* () {
    const ledger = yield* Ledger
    const requests = yield* Requests
    const idempotency = yield* IdempotencyStore
    const hold: Hold = { reservationId: newReservationId(Date.now()), requestId: newRequestId(Date.now()), projectId, period: PERIOD, amount, deadline }
    const scope = { projectId, environment: "development" }
    yield* ledger.reserve(hold)
    yield* requests.insertPending({
      ...pendingRequest({ id: hold.requestId, projectId, idempotencyKey: key, rateCardVersion: "rc_test", createdAt: 0 }),
      creditsReserved: amount
    })
    // The claim outlives the hold here, so only the sweep (not the claim's own expiry) can free it.
    expect(yield* idempotency.claim(scope, key, FP, hold.requestId, 10 * deadline)).toEqual({ _tag: "Claimed" })
    return { hold, scope }
  })

const claimsOf = (requestId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ n: number }>`SELECT COUNT(*) AS n FROM idempotency WHERE request_id = ${requestId}`).pipe(
    Effect.map((rows) => rows[0]!.n)
  )

describe("Recovery.sweep", () => {
  it.effect("voids an expired hold, fails its request, releases its claim; leaves a fresh hold alone", () =>
    Effect.gen(function* () {
      const recovery = yield* Recovery
      const ledger = yield* Ledger
      const requests = yield* Requests
      const idempotency = yield* IdempotencyStore
      const p = yield* newProject({ budget_credits: 1_000 })
      const stale = yield* startRequest(p.id, 300, 1_000, "stale")
      const fresh = yield* startRequest(p.id, 200, 10_000, "fresh")
      expect(yield* ledger.window(p.id, PERIOD)).toMatchObject({ spent: 0, reserved: 500 })

      // Nothing is due yet.
      yield* TestClock.setTime(999)
      expect(yield* recovery.sweep).toBe(0)

      yield* TestClock.setTime(2_000)
      expect(yield* recovery.sweep).toBe(1)
      expect(yield* ledger.window(p.id, PERIOD)).toMatchObject({ spent: 0, reserved: 200 })

      const failed = yield* requests.find(stale.hold.requestId, stale.scope)
      expect(failed).toMatchObject({
        status: "failed",
        credits_charged: 0,
        error: { code: "reservation_expired" },
        completed_at: new Date(2_000).toISOString()
      })
      expect(yield* claimsOf(stale.hold.requestId)).toBe(0)
      expect(yield* idempotency.claim(stale.scope, "stale", FP, newRequestId(Date.now()), 100_000)).toEqual({ _tag: "Claimed" })

      expect((yield* requests.find(fresh.hold.requestId, fresh.scope)).status).toBe("pending")
      expect(yield* claimsOf(fresh.hold.requestId)).toBe(1)
      expect(yield* idempotency.peek(fresh.scope, "fresh", FP)).toEqual({ _tag: "InFlight", requestId: fresh.hold.requestId })
      // The fresh hold can still be settled or voided by its own request.
      expect(yield* ledger.release(fresh.hold.reservationId)).toBe(true)

      // A second sweep finds nothing more to do.
      expect(yield* recovery.sweep).toBe(0)
      expect(yield* ledger.window(p.id, PERIOD)).toMatchObject({ spent: 0, reserved: 0 })
    }).pipe(Effect.provide(Live)))

  it.effect("a hold already resolved by its request is not touched, even past its deadline", () =>
    Effect.gen(function* () {
      const recovery = yield* Recovery
      const ledger = yield* Ledger
      const requests = yield* Requests
      const p = yield* newProject({ budget_credits: 1_000 })
      const done = yield* startRequest(p.id, 100, 1_000, "done")
      expect(yield* ledger.release(done.hold.reservationId)).toBe(true)
      yield* TestClock.setTime(5_000)
      expect(yield* recovery.sweep).toBe(0)
      // The request row was not failed by the sweep.
      expect((yield* requests.find(done.hold.requestId, done.scope)).status).toBe("pending")
    }).pipe(Effect.provide(Live)))

  it.effect("sweeps at start-up, before serving anything", () =>
    Effect.gen(function* () {
      const ledger = yield* Ledger
      const requests = yield* Requests
      const p = yield* newProject({ budget_credits: 1_000 })
      // Left behind by a previous process.
      const orphan = yield* startRequest(p.id, 400, 1_000, "orphan")
      yield* TestClock.setTime(1_000)
      yield* Effect.scoped(Layer.build(Recovery.Default))
      expect(yield* ledger.window(p.id, PERIOD)).toMatchObject({ reserved: 0 })
      expect((yield* requests.find(orphan.hold.requestId, orphan.scope)).status).toBe("failed")
    }).pipe(Effect.provide(Base)))

  it.effect("keeps sweeping in the background every 30 s", () =>
    Effect.gen(function* () {
      const ledger = yield* Ledger
      const p = yield* newProject({ budget_credits: 1_000 })
      yield* startRequest(p.id, 250, 5_000, "later")
      yield* TestClock.adjust(29_999)
      expect((yield* ledger.window(p.id, PERIOD)).reserved).toBe(250)
      yield* TestClock.adjust(1)
      // Let the background fiber finish its queries.
      for (let i = 0; i < 20 && (yield* ledger.window(p.id, PERIOD)).reserved !== 0; i++) yield* Effect.yieldNow()
      expect((yield* ledger.window(p.id, PERIOD)).reserved).toBe(0)
    }).pipe(Effect.provide(Live)))
})
