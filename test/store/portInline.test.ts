/**
 * The store port's bodies, inline on an in-memory store (fast: the mutation run uses it), at their
 * edges: a hold of exactly what is left fits and one Credit more does not; the client cap; the claim
 * answers before the budget; settle posts the clamped charge and finishes the record; abandon voids,
 * fails and frees; extend moves only live holds; expire voids exactly the holds past their deadline.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, Layer } from "effect"
import { Ledger } from "../../src/services/Ledger.ts"
import { Projects } from "../../src/services/Projects.ts"
import { ReceiptKeyLive, ReceiptSigner } from "../../src/services/ReceiptSigner.ts"
import { ChatStore } from "../../src/store/ChatStore.ts"
import { abandonArgs, DEFAULT_NOW, reserveArgs, settleArgs } from "../support/portArgs.ts"
import { newProject, storeLayer } from "../services/layers.ts"

const Live = Layer.mergeAll(Ledger.Default, ChatStore.Default.pipe(Layer.provide(ReceiptKeyLive))).pipe(
  Layer.provideMerge(Layer.mergeAll(Projects.Default, ReceiptSigner.Default)),
  Layer.provideMerge(storeLayer())
)
const PERIOD = "2026-01"
const windowOf = (projectId: string) => Effect.flatMap(Ledger, (l) => l.window(projectId, PERIOD))
const rows = (projectId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.all({
      holds: sql<{ amount: number; state: string; charge: number | null; deadline: number }>`SELECT amount, state, charge, deadline FROM reservations WHERE project_id = ${projectId} ORDER BY created_at, amount`,
      requests: sql<{ status: string; credits_charged: number | null; error_code: string | null }>`SELECT status, credits_charged, error_code FROM requests WHERE project_id = ${projectId} ORDER BY created_at, credits_reserved`,
      claims: sql<{ key: string; state: string; expires_at: number }>`SELECT key, state, expires_at FROM idempotency WHERE project_id = ${projectId} ORDER BY key`
    })
  ).pipe(Effect.orDie)

describe("the store port, inline", () => {
  it.effect("reserve: exactly what is left fits, one Credit more is refused with nothing written", () =>
    Effect.gen(function* () {
      const store = yield* ChatStore
      const p = yield* newProject({ budget_credits: 100 })
      expect(yield* store.reserve(reserveArgs(p.id, 60))).toEqual({ outputCap: 1, reservation: 60 })
      const over = yield* Effect.either(store.reserve(reserveArgs(p.id, 41)))
      expect(Either.isLeft(over) && over.left._tag).toBe("OverBudget")
      expect(Either.isLeft(over) && over.left._tag === "OverBudget" && over.left.param).toBe("project")
      expect((yield* rows(p.id)).requests).toHaveLength(1)
      expect(yield* store.reserve(reserveArgs(p.id, 40))).toEqual({ outputCap: 1, reservation: 40 })
      expect(yield* windowOf(p.id)).toMatchObject({ spent: 0, reserved: 100 })
      // A hold of 0 still fits a full window; one of 1 does not.
      expect(yield* store.reserve(reserveArgs(p.id, 0))).toEqual({ outputCap: 1, reservation: 0 })
      expect(Either.isLeft(yield* Effect.either(store.reserve(reserveArgs(p.id, 1))))).toBe(true)
    }).pipe(Effect.provide(Live)))

  it.effect("reserve: the client cap refuses with its parameter named", () =>
    Effect.gen(function* () {
      const store = yield* ChatStore
      const p = yield* newProject({ budget_credits: 1_000 })
      expect(yield* store.reserve(reserveArgs(p.id, 10, { maxCredits: 10 }))).toEqual({ outputCap: 1, reservation: 10 })
      const refused = yield* Effect.either(store.reserve(reserveArgs(p.id, 11, { maxCredits: 10 })))
      expect(Either.isLeft(refused) && refused.left).toMatchObject({ _tag: "OverBudget", param: "X-Max-Credits" })
    }).pipe(Effect.provide(Live)))

  it.effect("reserve: the claim answers first — a conflict or a call in flight is refused even when the budget is gone, and writes nothing", () =>
    Effect.gen(function* () {
      const store = yield* ChatStore
      const p = yield* newProject({ budget_credits: 50 })
      const first = reserveArgs(p.id, 50, { claim: { key: "k", fingerprint: "f" } })
      yield* store.reserve(first)
      const again = yield* Effect.either(store.reserve(reserveArgs(p.id, 50, { claim: { key: "k", fingerprint: "f" } })))
      expect(Either.isLeft(again) && again.left).toEqual({ _tag: "ClaimLost", outcome: { _tag: "InFlight", requestId: first.request.id } })
      const conflict = yield* Effect.either(store.reserve(reserveArgs(p.id, 50, { claim: { key: "k", fingerprint: "g" } })))
      expect(Either.isLeft(conflict) && conflict.left).toEqual({ _tag: "ClaimLost", outcome: { _tag: "Conflict" } })
      expect((yield* rows(p.id)).holds).toHaveLength(1)
      // A refused budget rolls the claim back: the key is free again.
      const q = yield* newProject({ budget_credits: 5 })
      expect(Either.isLeft(yield* Effect.either(store.reserve(reserveArgs(q.id, 6, { claim: { key: "k2", fingerprint: "f" } }))))).toBe(true)
      expect((yield* rows(q.id)).claims).toEqual([])
    }).pipe(Effect.provide(Live)))

  it.effect("reserve: the hold and the claim carry the reserving process's epoch (what recovery of a dead epoch looks for)", () =>
    Effect.gen(function* () {
      const store = yield* ChatStore
      const sql = yield* SqlClient.SqlClient
      const p = yield* newProject({ budget_credits: 100 })
      yield* store.reserve({ ...reserveArgs(p.id, 10, { claim: { key: "k", fingerprint: "f" } }), epoch: 7 })
      const epochs = yield* Effect.all({
        holds: sql<{ epoch: number | null }>`SELECT epoch FROM reservations WHERE project_id = ${p.id}`,
        claims: sql<{ epoch: number | null }>`SELECT epoch FROM idempotency WHERE project_id = ${p.id}`
      }).pipe(Effect.orDie)
      expect(epochs).toEqual({ holds: [{ epoch: 7 }], claims: [{ epoch: 7 }] })
    }).pipe(Effect.provide(Live)))

  it.effect("settle: posts the charge clamped to the stored hold on the window, the request and the receipt, and finishes the record", () =>
    Effect.gen(function* () {
      const store = yield* ChatStore
      const p = yield* newProject({ budget_credits: 100 })
      const a = reserveArgs(p.id, 30, { claim: { key: "k", fingerprint: "f" } })
      yield* store.reserve(a)
      yield* store.settle(settleArgs(a, 30, 45))
      expect(yield* windowOf(p.id)).toMatchObject({ spent: 30, reserved: 0 })
      const r = yield* rows(p.id)
      expect(r.holds).toMatchObject([{ amount: 30, state: "settled", charge: 30 }])
      expect(r.requests).toEqual([{ status: "completed", credits_charged: 30, error_code: null }])
      expect(r.claims).toMatchObject([{ key: "k", state: "finished", expires_at: a.now + 1 + 86_400_000 }])
      const receipt = yield* Effect.flatMap(Ledger, (l) => l.receipt(a.request.id, a.claim!.scope))
      expect([receipt.credits_charged, receipt.credits_reserved, receipt.seq]).toEqual([30, 30, 1])
    }).pipe(Effect.provide(Live)))

  it.effect("abandon: voids the hold, fails the request, frees the key; twice changes nothing", () =>
    Effect.gen(function* () {
      const store = yield* ChatStore
      const p = yield* newProject({ budget_credits: 100 })
      const a = reserveArgs(p.id, 70, { claim: { key: "k", fingerprint: "f" } })
      yield* store.reserve(a)
      yield* store.abandon(abandonArgs(a, { code: "route_unavailable" }))
      yield* store.abandon(abandonArgs(a, { code: "other" }))
      expect(yield* windowOf(p.id)).toMatchObject({ spent: 0, reserved: 0 })
      const r = yield* rows(p.id)
      expect(r.holds).toMatchObject([{ amount: 70, state: "voided", charge: 0 }])
      expect(r.requests).toEqual([{ status: "failed", credits_charged: 0, error_code: "route_unavailable" }])
      expect(r.claims).toEqual([])
    }).pipe(Effect.provide(Live)))

  it.effect("extend moves a live hold and its claim; expire voids exactly the holds whose deadline passed", () =>
    Effect.gen(function* () {
      const store = yield* ChatStore
      const p = yield* newProject({ budget_credits: 1_000 })
      const early = reserveArgs(p.id, 10, { deadline: DEFAULT_NOW + 1_000, claim: { key: "e", fingerprint: "f" } })
      const late = reserveArgs(p.id, 20, { deadline: DEFAULT_NOW + 1_000, claim: { key: "l", fingerprint: "f" } })
      yield* store.reserve(early)
      yield* store.reserve(late)
      yield* store.extend({ deadline: DEFAULT_NOW + 5_000, streams: [{ reservationId: late.hold.reservationId, requestId: late.request.id, idempotent: { scope: late.claim!.scope, key: "l" } }] })
      const failure = { code: "reservation_expired", message: "expired" }
      expect(yield* store.expire({ now: DEFAULT_NOW + 999, failure })).toBe(0)
      expect(yield* store.expire({ now: DEFAULT_NOW + 1_000, failure })).toBe(1)
      expect(yield* store.expire({ now: DEFAULT_NOW + 1_000, failure })).toBe(0)
      let r = yield* rows(p.id)
      expect(r.holds.map((h) => [h.amount, h.state, h.deadline])).toEqual([[10, "voided", DEFAULT_NOW + 1_000], [20, "held", DEFAULT_NOW + 5_000]])
      expect(r.claims).toMatchObject([{ key: "l", state: "in_flight", expires_at: DEFAULT_NOW + 5_000 }])
      expect(r.requests.map((q) => q.error_code)).toEqual(["reservation_expired", null])
      expect(yield* store.expire({ now: DEFAULT_NOW + 5_000, failure })).toBe(1)
      r = yield* rows(p.id)
      expect(r.holds.map((h) => h.state)).toEqual(["voided", "voided"])
      expect(r.claims).toEqual([])
      expect(yield* windowOf(p.id)).toMatchObject({ spent: 0, reserved: 0 })
    }).pipe(Effect.provide(Live)))
})

describe("the store port sizes on the window it reads in its transaction", () => {
  it.effect("without max_tokens the output cap is what the budget left affords (cap − spent − reserved)", () =>
    Effect.gen(function* () {
      const store = yield* ChatStore
      const p = yield* newProject({ budget_credits: 100 })
      // 10 input tokens at 1 Credit, output at 1 Credit a token, the route allows 1,000.
      const sized = (amount: number) => {
        const a = reserveArgs(p.id, amount)
        return { ...a, sizing: { ...a.sizing, requested: undefined, chain: [{ name: "demo", prices: { input: 1_000_000, output: 1_000_000 }, routeLimit: 1_000 }] } }
      }
      const first = sized(10)
      yield* store.reserve(reserveArgs(p.id, 20))
      const a = yield* store.reserve(first)
      yield* store.settle(settleArgs(first, a.reservation, 5))
      // Left: 100 − 5 spent − 20 reserved = 75: 10 input + 65 output tokens.
      expect(yield* store.reserve(sized(10))).toEqual({ outputCap: 65, reservation: 75 })
    }).pipe(Effect.provide(Live)))
})
