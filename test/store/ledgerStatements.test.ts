/**
 * The ledger's statements (src/store/ledgerStatements.ts), one at a time: the guarded reservation (spent + reserved ≤ cap), settle/void exactly once, windows per
 * calendar month, and the per-project receipt chain written with the charge.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, TestClock } from "effect"
import { GENESIS_HASH, verifyReceipt } from "../../spec/receipt.ts"
import { holdRefusedMessage } from "../../src/domain/budgetSizing.ts"
import type { TokenCounts } from "../../spec/pricing.ts"
import { newReceiptId, newRequestId, newReservationId } from "../../src/domain/ids.ts"
import { type Hold, Ledger, periodOf, type Settlement } from "../../src/services/Ledger.ts"
import { Projects } from "../../src/services/Projects.ts"
import { ReceiptSigner } from "../../src/services/ReceiptSigner.ts"
import { ledgerStatements } from "../support/statements.ts"
import { newProject, storeLayer } from "../services/layers.ts"

const Live = Ledger.Default.pipe(Layer.provideMerge(Layer.mergeAll(Projects.Default, ReceiptSigner.Default)), Layer.provideMerge(storeLayer()))

const JAN = "2026-01"
const FEB = "2026-02"

const holdOf = (projectId: string, amount: number, period = JAN): Hold => ({
  reservationId: newReservationId(Date.now()),
  requestId: newRequestId(Date.now()),
  projectId,
  period,
  amount,
  deadline: 60_000
})

const TOKENS: TokenCounts = { input: 10, cached_input: 2, output: 5, reasoning: 1 }

const settlementOf = (hold: Hold, charge: number, extra: Partial<Settlement> = {}): Settlement => ({
  hold,
  receiptId: newReceiptId(Date.now()),
  organization: "org_test",
  environment: "development",
  model: "auto",
  route: "demo",
  rateCardVersion: "rc_2026-01",
  tokens: TOKENS,
  usageSource: "reported",
  charge,
  verification: { state: "verified", checks: ["usage"], failed_checks: [] },
  ...extra
})

const windowOf = (projectId: string, period = JAN) => Effect.flatMap(Ledger, (l) => l.window(projectId, period))

describe("Ledger.reserve", () => {
  it.effect("admits an exact fit and refuses one Credit over, leaving the window unchanged", () =>
    Effect.gen(function* () {
      const ledger = yield* ledgerStatements
      const p = yield* newProject({ budget_credits: 100 })
      expect(yield* windowOf(p.id)).toEqual({ period: JAN, cap: 100, spent: 0, reserved: 0 })

      const over = yield* Effect.flip(ledger.reserve(holdOf(p.id, 101)))
      expect(over._tag).toBe("BudgetExceeded")
      expect(holdRefusedMessage(101, JAN)).toContain("needs up to 101 Credits")
      expect(yield* windowOf(p.id)).toEqual({ period: JAN, cap: 100, spent: 0, reserved: 0 })

      yield* ledger.reserve(holdOf(p.id, 60))
      expect((yield* Effect.flip(ledger.reserve(holdOf(p.id, 41))))._tag).toBe("BudgetExceeded")
      yield* ledger.reserve(holdOf(p.id, 40))
      expect(yield* windowOf(p.id)).toEqual({ period: JAN, cap: 100, spent: 0, reserved: 100 })
      // Full: even a one-Credit hold is refused, a zero hold still fits.
      expect((yield* Effect.flip(ledger.reserve(holdOf(p.id, 1))))._tag).toBe("BudgetExceeded")
      yield* ledger.reserve(holdOf(p.id, 0))
    }).pipe(Effect.provide(Live)))

  it.effect("counts what was spent: settled charges leave less room for new holds", () =>
    Effect.gen(function* () {
      const ledger = yield* ledgerStatements
      const p = yield* newProject({ budget_credits: 100 })
      const h = holdOf(p.id, 80)
      yield* ledger.reserve(h)
      yield* ledger.settle(settlementOf(h, 70))
      expect(yield* windowOf(p.id)).toEqual({ period: JAN, cap: 100, spent: 70, reserved: 0 })
      expect((yield* Effect.flip(ledger.reserve(holdOf(p.id, 31))))._tag).toBe("BudgetExceeded")
      yield* ledger.reserve(holdOf(p.id, 30))
    }).pipe(Effect.provide(Live)))

  it.effect("the cap is read at reservation time: a raised cap admits more at once", () =>
    Effect.gen(function* () {
      const ledger = yield* ledgerStatements
      const projects = yield* Projects
      const p = yield* newProject({ budget_credits: 10 })
      expect((yield* Effect.flip(ledger.reserve(holdOf(p.id, 50))))._tag).toBe("BudgetExceeded")
      yield* projects.update(p.id, { budget_credits: 50 })
      yield* ledger.reserve(holdOf(p.id, 50))
      expect((yield* windowOf(p.id)).reserved).toBe(50)
    }).pipe(Effect.provide(Live)))

  it.effect("windows roll over by period: a full January does not limit February", () =>
    Effect.gen(function* () {
      const ledger = yield* ledgerStatements
      const p = yield* newProject({ budget_credits: 100 })
      const jan = holdOf(p.id, 100, JAN)
      yield* ledger.reserve(jan)
      yield* ledger.settle(settlementOf(jan, 100))
      expect((yield* Effect.flip(ledger.reserve(holdOf(p.id, 1, JAN))))._tag).toBe("BudgetExceeded")
      yield* ledger.reserve(holdOf(p.id, 100, FEB))
      expect(yield* windowOf(p.id, JAN)).toEqual({ period: JAN, cap: 100, spent: 100, reserved: 0 })
      expect(yield* windowOf(p.id, FEB)).toEqual({ period: FEB, cap: 100, spent: 0, reserved: 100 })
      expect(yield* windowOf(p.id, "2026-03")).toEqual({ period: "2026-03", cap: 100, spent: 0, reserved: 0 })
    }).pipe(Effect.provide(Live)))

  it("periodOf is the UTC calendar month of an instant", () => {
    expect(periodOf(Date.UTC(2026, 0, 31, 23, 59, 59, 999))).toBe(JAN)
    expect(periodOf(Date.UTC(2026, 1, 1))).toBe(FEB)
  })
})

describe("Ledger.settle and release", () => {
  it.effect("settle posts the charge, releases the rest of the hold and writes a signed receipt", () =>
    Effect.gen(function* () {
      const ledger = yield* ledgerStatements
      const signer = yield* ReceiptSigner
      const p = yield* newProject({ budget_credits: 1_000 })
      const h = holdOf(p.id, 100)
      yield* ledger.reserve(h)
      yield* ledger.reserve(holdOf(p.id, 200))
      yield* TestClock.setTime(Date.UTC(2026, 0, 15))
      const receipt = yield* ledger.settle(settlementOf(h, 30))
      expect(yield* windowOf(p.id)).toEqual({ period: JAN, cap: 1_000, spent: 30, reserved: 200 })
      expect(receipt).toMatchObject({
        request_id: h.requestId,
        project_id: p.id,
        credits_reserved: 100,
        credits_charged: 30,
        period: JAN,
        tokens: TOKENS,
        signing_key_id: signer.keyId,
        created_at: "2026-01-15T00:00:00.000Z"
      })
      expect(verifyReceipt(receipt, signer.publicPem)).toEqual([])
      expect(yield* ledger.receipt(h.requestId, { projectId: p.id, environment: "development" })).toEqual(receipt)
      // Another tenant scope cannot read it.
      const hidden = yield* Effect.flip(ledger.receipt(h.requestId, { projectId: p.id, environment: "production" }))
      expect(hidden._tag).toBe("RequestNotFound")
    }).pipe(Effect.provide(Live)))

  it.effect("a charge above the hold is capped at the hold: posts min(charge, amount)", () =>
    Effect.gen(function* () {
      const ledger = yield* ledgerStatements
      const p = yield* newProject({ budget_credits: 100 })
      const h = holdOf(p.id, 100)
      yield* ledger.reserve(h)
      const receipt = yield* ledger.settle(settlementOf(h, 150))
      expect(receipt.credits_charged).toBe(100)
      expect(yield* windowOf(p.id)).toEqual({ period: JAN, cap: 100, spent: 100, reserved: 0 })
    }).pipe(Effect.provide(Live)))

  it.effect("the clamp uses the amount stored with the hold, not what the caller claims it reserved", () =>
    Effect.gen(function* () {
      const ledger = yield* ledgerStatements
      const p = yield* newProject({ budget_credits: 100 })
      const h = holdOf(p.id, 10)
      yield* ledger.reserve(h)
      const receipt = yield* ledger.settle(settlementOf({ ...h, amount: 1000 }, 500))
      expect(receipt.credits_charged).toBe(10)
      expect(receipt.credits_reserved).toBe(10)
      expect(yield* windowOf(p.id)).toEqual({ period: JAN, cap: 100, spent: 10, reserved: 0 })
    }).pipe(Effect.provide(Live)))

  it.effect("extendHold moves a live hold's deadline out of the sweep's reach, and only a live one", () =>
    Effect.gen(function* () {
      const ledger = yield* ledgerStatements
      const p = yield* newProject({ budget_credits: 100 })
      const h = holdOf(p.id, 10)
      yield* ledger.reserve(h)
      yield* ledger.extendHold(h.reservationId, 120_000)
      expect(yield* ledger.expiredHolds(60_000)).toEqual([])
      expect((yield* ledger.expiredHolds(120_000)).map((x) => x.id)).toEqual([h.reservationId])
      yield* ledger.release(h.reservationId)
      yield* ledger.extendHold(h.reservationId, 999_999)
      expect(yield* ledger.expiredHolds(1_000_000)).toEqual([])
    }).pipe(Effect.provide(Live)))

  it.effect("settling a hold twice dies and changes nothing the second time", () =>
    Effect.gen(function* () {
      const ledger = yield* ledgerStatements
      const p = yield* newProject({ budget_credits: 100 })
      const h = holdOf(p.id, 50)
      yield* ledger.reserve(h)
      yield* ledger.settle(settlementOf(h, 20))
      const second = yield* Effect.exit(ledger.settle(settlementOf(h, 20)))
      expect(Exit.isFailure(second) && Cause.isDie(second.cause)).toBe(true)
      expect(yield* windowOf(p.id)).toEqual({ period: JAN, cap: 100, spent: 20, reserved: 0 })
      // Settling a voided hold dies too.
      const v = holdOf(p.id, 10)
      yield* ledger.reserve(v)
      expect(yield* ledger.release(v.reservationId)).toBe(true)
      const afterVoid = yield* Effect.exit(ledger.settle(settlementOf(v, 5)))
      expect(Exit.isFailure(afterVoid) && Cause.isDie(afterVoid.cause)).toBe(true)
      expect(yield* windowOf(p.id)).toEqual({ period: JAN, cap: 100, spent: 20, reserved: 0 })
    }).pipe(Effect.provide(Live)))

  it.effect("release voids a hold once: true then false, and never touches spent", () =>
    Effect.gen(function* () {
      const ledger = yield* ledgerStatements
      const p = yield* newProject({ budget_credits: 100 })
      const h = holdOf(p.id, 70)
      yield* ledger.reserve(h)
      expect(yield* ledger.release(h.reservationId)).toBe(true)
      expect(yield* windowOf(p.id)).toEqual({ period: JAN, cap: 100, spent: 0, reserved: 0 })
      expect(yield* ledger.release(h.reservationId)).toBe(false)
      expect(yield* windowOf(p.id)).toEqual({ period: JAN, cap: 100, spent: 0, reserved: 0 })
      expect(yield* ledger.release("rsv_unknown")).toBe(false)
      // A settled hold cannot be voided afterwards either.
      const s = holdOf(p.id, 40)
      yield* ledger.reserve(s)
      yield* ledger.settle(settlementOf(s, 25))
      expect(yield* ledger.release(s.reservationId)).toBe(false)
      expect(yield* windowOf(p.id)).toEqual({ period: JAN, cap: 100, spent: 25, reserved: 0 })
    }).pipe(Effect.provide(Live)))

  it.effect("expiredHolds lists held reservations whose deadline has passed, only", () =>
    Effect.gen(function* () {
      const ledger = yield* ledgerStatements
      const p = yield* newProject({ budget_credits: 100 })
      const early = { ...holdOf(p.id, 1), deadline: 1_000 }
      const late = { ...holdOf(p.id, 1), deadline: 5_000 }
      const settled = { ...holdOf(p.id, 1), deadline: 1_000 }
      for (const h of [early, late, settled]) yield* ledger.reserve(h)
      yield* ledger.settle(settlementOf(settled, 1))
      expect(yield* ledger.expiredHolds(999)).toEqual([])
      expect(yield* ledger.expiredHolds(1_000)).toEqual([{ id: early.reservationId, request_id: early.requestId }])
      expect((yield* ledger.expiredHolds(5_000)).map((r) => r.id).sort()).toEqual([early.reservationId, late.reservationId].sort())
    }).pipe(Effect.provide(Live)))
})

describe("Ledger receipt chain and usage", () => {
  it.effect("receipts of a project chain by prev_hash with seq 1, 2, 3; each project has its own chain", () =>
    Effect.gen(function* () {
      const ledger = yield* ledgerStatements
      const signer = yield* ReceiptSigner
      const a = yield* newProject({ budget_credits: 1_000 })
      const b = yield* newProject({ budget_credits: 1_000 })
      const settleOne = (projectId: string, period: string, env = "development") =>
        Effect.gen(function* () {
          const h = holdOf(projectId, 10, period)
          yield* ledger.reserve(h)
          return yield* ledger.settle(settlementOf(h, 5, { environment: env }))
        })
      const a1 = yield* settleOne(a.id, JAN)
      const b1 = yield* settleOne(b.id, JAN)
      // The chain spans environments and windows of one project.
      const a2 = yield* settleOne(a.id, FEB, "production")
      const a3 = yield* settleOne(a.id, JAN)
      expect([a1.seq, a2.seq, a3.seq, b1.seq]).toEqual([1, 2, 3, 1])
      expect(a1.prev_hash).toBe(GENESIS_HASH)
      expect(a2.prev_hash).toBe(a1.hash)
      expect(a3.prev_hash).toBe(a2.hash)
      expect(b1.prev_hash).toBe(GENESIS_HASH)
      expect(new Set([a1.hash, a2.hash, a3.hash, b1.hash]).size).toBe(4)
      for (const r of [a1, a2, a3, b1]) expect(verifyReceipt(r, signer.publicPem)).toEqual([])
    }).pipe(Effect.provide(Live)))

  it.effect("usage sums the receipts of one scope and window, per route (the group named by its route)", () =>
    Effect.gen(function* () {
      const ledger = yield* ledgerStatements
      const p = yield* newProject({ budget_credits: 10_000 })
      const other = yield* newProject({ budget_credits: 10_000 })
      const settleOne = (projectId: string, route: string, charge: number, tokens: TokenCounts, period = JAN, environment = "development") =>
        Effect.gen(function* () {
          const h = holdOf(projectId, 100, period)
          yield* ledger.reserve(h)
          yield* ledger.settle(settlementOf(h, charge, { route, tokens, environment }))
        })
      yield* settleOne(p.id, "b-route", 7, { input: 1, cached_input: 0, output: 2, reasoning: 0 })
      yield* settleOne(p.id, "a-route", 11, { input: 10, cached_input: 3, output: 20, reasoning: 4 })
      yield* settleOne(p.id, "a-route", 13, { input: 5, cached_input: 1, output: 6, reasoning: 2 })
      // Not counted: another window, another environment, another project, a voided hold.
      yield* settleOne(p.id, "a-route", 17, TOKENS, FEB)
      yield* settleOne(p.id, "a-route", 19, TOKENS, JAN, "production")
      yield* settleOne(other.id, "a-route", 23, TOKENS)
      const voided = holdOf(p.id, 100)
      yield* ledger.reserve(voided)
      yield* ledger.release(voided.reservationId)

      expect(yield* ledger.usage({ projectId: p.id, environment: "development" }, JAN)).toEqual([
        { group: "a-route", requests: 2, credits: 24, tokens: { input: 15, cached_input: 4, output: 26, reasoning: 6 } },
        { group: "b-route", requests: 1, credits: 7, tokens: { input: 1, cached_input: 0, output: 2, reasoning: 0 } }
      ])
      expect(yield* ledger.usage({ projectId: p.id, environment: "development" }, "2025-12")).toEqual([])
    }).pipe(Effect.provide(Live)))
})
