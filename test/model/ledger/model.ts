/**
 * Ledger model run: the real Ledger (SQLite, through its Effect interface) against spec/ledger.ts.
 *
 * Model = the spec's LedgerState (mutable holder). Real = the services runtime plus this run's two
 * projects (created through the Projects service, because the real reserve reads the cap from the
 * projects table) and the holds it made. After every command `checkInvariants` compares every
 * observable number with the model and asserts the ledger invariants on the real store.
 */
import fc from "fast-check"
import { Effect } from "effect"
import { expect } from "vitest"
import * as Ledger from "../../../spec/ledger.ts"
import type { Hold } from "../../../src/services/Ledger.ts"
import { Ledger as LedgerService } from "../../../src/services/Ledger.ts"
import type { Coverage } from "../support/coverage.ts"
import { run, select, type ServicesRuntime } from "../support/runtime.ts"

/** Two settlement windows: the real cap is per project (all windows), the model's SetCap covers both. */
export const PERIODS = ["2026-11", "2026-12"] as const
/** Far future: the recovery sweep must never void a hold behind the model's back. */
export const NEVER = 8.64e15

export interface LedgerModel {
  state: Ledger.LedgerState
}

export interface LedgerReal {
  readonly rt: ServicesRuntime
  readonly coverage: Coverage
  readonly projects: ReadonlyArray<string>
  readonly holds: Map<string, Hold>
  /**
   * Present in the scheduled property: decides the order racing operations start in. Not the
   * scheduler given to scheduledModelRun (see ConcurrentReserveCommand), a second one.
   */
  readonly scheduler: fc.Scheduler | undefined
  nextId: () => string
}

export type LedgerCommand = fc.AsyncCommand<LedgerModel, LedgerReal>

/** Reservation ids known to the model, in creation order (commands pick among them by index). */
export const reservationIds = (m: LedgerModel): ReadonlyArray<string> => [...m.state.reservations.keys()]

export const holdOf = (r: LedgerReal, project: string, period: string, amount: number): Hold => {
  const id = r.nextId()
  return { reservationId: `res_${id}`, requestId: `req_${id}`, projectId: project, period, amount, deadline: NEVER }
}

interface WindowRow { project_id: string; period: string; spent: number; reserved: number }
interface ReservationRow { id: string; request_id: string; project_id: string; period: string; amount: number; state: string; charge: number | null; resolved_at: number | null }
interface ReceiptRow { request_id: string; project_id: string; period: string; seq: number; credits_charged: number; body: string }

/** Every observable of the real ledger equals the model's, and the ledger invariants hold on the real store. */
export const checkInvariants = async (m: LedgerModel, r: LedgerReal): Promise<void> => {
  const inList = r.projects.map(() => "?").join(",")
  const [windows, reservations, receipts, viaService] = await run(
    r.rt,
    Effect.all([
      select<WindowRow>(`SELECT project_id, period, spent, reserved FROM budget_windows WHERE project_id IN (${inList})`, ...r.projects),
      select<ReservationRow>(`SELECT id, request_id, project_id, period, amount, state, charge, resolved_at FROM reservations WHERE project_id IN (${inList})`, ...r.projects),
      select<ReceiptRow>(`SELECT request_id, project_id, period, seq, credits_charged, body FROM receipts WHERE project_id IN (${inList}) ORDER BY project_id, seq`, ...r.projects),
      Effect.flatMap(LedgerService, (l) => Effect.forEach(r.projects.flatMap((p) => PERIODS.map((period) => [p, period] as const)), ([p, period]) => Effect.map(l.window(p, period), (w) => ({ p, w }))))
    ])
  )

  // The model itself is sound (a broken model would make every comparison meaningless).
  expect(Ledger.violations(m.state)).toEqual([])

  for (const { p, w } of viaService) {
    const a = Ledger.accountOf(m.state, p, w.period)
    // What the service reports: cap, spent, reserved equal the model's.
    expect({ project: p, period: w.period, cap: w.cap, spent: w.spent, reserved: w.reserved }).toEqual({ project: p, period: w.period, cap: a.cap, spent: a.spent, reserved: a.reserved })
    // No overspend: spent + reserved ≤ cap, unless the cap was lowered under commitments made before.
    expect(w.spent + w.reserved).toBeLessThanOrEqual(Math.max(w.cap, a.grandfathered))
    // Conservation: spent + reserved + available = cap (available never negative).
    if (a.grandfathered === 0) expect(w.spent + w.reserved + Ledger.remaining(m.state, p, w.period)).toBe(w.cap)
    expect(w.spent).toBeGreaterThanOrEqual(0)
    expect(w.reserved).toBeGreaterThanOrEqual(0)
  }
  // No window rows the model does not know about.
  for (const row of windows) expect(PERIODS as ReadonlyArray<string>).toContain(row.period)

  // Each reservation: same amount and state as the model, resolved at most once (resolved_at iff resolved).
  expect(reservations.length).toBe(m.state.reservations.size)
  const receiptsByRequest = new Map<string, Array<ReceiptRow>>()
  for (const rc of receipts) receiptsByRequest.set(rc.request_id, [...(receiptsByRequest.get(rc.request_id) ?? []), rc])
  const settledSum = new Map<string, number>()
  for (const row of reservations) {
    const mr = m.state.reservations.get(row.id)
    expect(mr, `reservation ${row.id} unknown to the model`).toBeDefined()
    expect({ id: row.id, amount: row.amount, state: row.state, charge: row.state === "settled" ? row.charge : undefined }).toEqual({
      id: row.id,
      amount: mr!.amount,
      state: mr!.state,
      charge: mr!.charge
    })
    expect(row.resolved_at !== null).toBe(mr!.state !== "held")
    // Exactly one receipt (and one debit) per charged request, none for a hold or a void.
    const rcs = receiptsByRequest.get(row.request_id) ?? []
    expect(rcs.length, `receipts for ${row.request_id}`).toBe(row.state === "settled" ? 1 : 0)
    if (row.state === "settled") {
      const body = JSON.parse(rcs[0]!.body) as { credits_charged: number; credits_reserved: number }
      expect([rcs[0]!.credits_charged, body.credits_charged, body.credits_reserved]).toEqual([mr!.charge, mr!.charge, mr!.amount])
      const key = Ledger.accountKey(row.project_id, row.period)
      settledSum.set(key, (settledSum.get(key) ?? 0) + rcs[0]!.credits_charged)
    }
  }
  expect(receipts.length).toBe([...m.state.reservations.values()].filter((x) => x.state === "settled").length)
  // The debits (receipts) add up to spent, window by window.
  for (const row of windows) expect(settledSum.get(Ledger.accountKey(row.project_id, row.period)) ?? 0).toBe(row.spent)
  // Each project's receipt chain is contiguous: seq 1..n.
  for (const p of r.projects) {
    const seqs = receipts.filter((x) => x.project_id === p).map((x) => x.seq)
    expect(seqs).toEqual(seqs.map((_, i) => i + 1))
  }
}
