/**
 * Ledger model run: the store port production runs (ChatStore's reserve / settle / abandon, in the
 * store worker, on a SQLite file, batched and group-committed) against spec/ledger.ts.
 *
 * Model = the spec's LedgerState (mutable holder). Real = a runtime of `ServicesLive` on a file
 * store plus this run's two projects (created through the Projects service, because the reservation
 * reads the cap from the projects table) and the reservations it made. After every command
 * `checkInvariants` compares every observable number with the model and runs the spec's checkers
 * over the store's rows (spec/ledger.ts `checkLedgerRows`).
 */
import fc from "fast-check"
import { Effect } from "effect"
import { expect } from "vitest"
import * as Ledger from "../../../spec/ledger.ts"
import { Ledger as LedgerService } from "../../../src/services/Ledger.ts"
import type { ReserveArgs } from "../../../src/store/chatTransactions.ts"
import { reserveArgs } from "../../support/portArgs.ts"
import type { Coverage } from "../support/coverage.ts"
import { type PortRuntime, run, select } from "../support/runtime.ts"

/** Two settlement windows: the real cap is per project (all windows), the model's SetCap covers both. */
export const PERIODS = ["2026-11", "2026-12"] as const
/** Far future: the recovery sweep must never void a hold behind the model's back. */
export const NEVER = 8.64e15

export interface LedgerModel {
  state: Ledger.LedgerState
}

export interface LedgerReal {
  readonly rt: PortRuntime
  readonly coverage: Coverage
  readonly projects: ReadonlyArray<string>
  /** The reservation each admitted hold was made with, by reservation id. */
  readonly holds: Map<string, ReserveArgs>
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

/** The reservation the Gateway would send for a hold of exactly `amount` Credits (the sizing makes it so). */
export const reservationOf = (r: LedgerReal, project: string, period: string, amount: number): ReserveArgs => {
  const id = r.nextId()
  return reserveArgs(project, amount, { now: Date.now(), period, deadline: NEVER, ids: { reservationId: `rsv_${id}`, requestId: `req_${id}` } })
}

interface WindowRow { project_id: string; period: string; spent: number; reserved: number }
interface ReservationRow { id: string; request_id: string; project_id: string; period: string; amount: number; state: string; charge: number | null; resolved_at: number | null; created_at: number }
interface ReceiptRow { request_id: string; project_id: string; period: string; seq: number; credits_charged: number; prev_hash: string; hash: string; body: string }
interface RequestRow { id: string; status: string; credits_reserved: number; credits_charged: number | null }

/** Every observable of the real ledger equals the model's, and the ledger invariants hold on the real store's rows. */
export const checkInvariants = async (m: LedgerModel, r: LedgerReal): Promise<void> => {
  const inList = r.projects.map(() => "?").join(",")
  const [windows, reservations, receipts, requests, projects, viaService] = await run(
    r.rt,
    Effect.all([
      select<WindowRow>(`SELECT project_id, period, spent, reserved FROM budget_windows WHERE project_id IN (${inList})`, ...r.projects),
      select<ReservationRow>(`SELECT id, request_id, project_id, period, amount, state, charge, resolved_at, created_at FROM reservations WHERE project_id IN (${inList})`, ...r.projects),
      select<ReceiptRow>(`SELECT request_id, project_id, period, seq, credits_charged, prev_hash, hash, body FROM receipts WHERE project_id IN (${inList}) ORDER BY project_id, seq`, ...r.projects),
      select<RequestRow>(`SELECT id, status, credits_reserved, credits_charged FROM requests WHERE project_id IN (${inList})`, ...r.projects),
      select<{ id: string; budget_credits: number; updated_at: number }>(`SELECT id, budget_credits, updated_at FROM projects WHERE id IN (${inList})`, ...r.projects),
      Effect.flatMap(LedgerService, (l) => Effect.forEach(r.projects.flatMap((p) => PERIODS.map((period) => [p, period] as const)), ([p, period]) => Effect.map(l.window(p, period), (w) => ({ p, w }))))
    ])
  )

  // The model itself is sound (a broken model would make every comparison meaningless).
  expect(Ledger.violations(m.state)).toEqual([])
  // The rulebook's checkers over the store's rows (the same ones `tollgate audit` and TOLLGATE_ASSERT run).
  expect(
    Ledger.checkLedgerRows({
      projects: projects.map((p) => ({ id: p.id, cap: p.budget_credits, capChangedAt: p.updated_at })),
      windows: windows.map((w) => ({ project: w.project_id, period: w.period, spent: w.spent, reserved: w.reserved })),
      reservations: reservations.map((x) => ({ id: x.id, requestId: x.request_id, project: x.project_id, period: x.period, amount: x.amount, state: x.state, charge: x.charge, createdAt: x.created_at })),
      receipts: receipts.map((x) => ({ requestId: x.request_id, project: x.project_id, period: x.period, seq: x.seq, charge: x.credits_charged, prevHash: x.prev_hash, hash: x.hash }))
    })
  ).toEqual([])

  for (const { p, w } of viaService) {
    const a = Ledger.accountOf(m.state, p, w.period)
    // What the service reports: cap, spent, reserved equal the model's.
    expect({ project: p, period: w.period, cap: w.cap, spent: w.spent, reserved: w.reserved }).toEqual({ project: p, period: w.period, cap: a.cap, spent: a.spent, reserved: a.reserved })
    // No overspend: spent + reserved ≤ cap, unless the cap was lowered under commitments made before.
    expect(w.spent + w.reserved).toBeLessThanOrEqual(Math.max(w.cap, a.grandfathered))
    // Conservation: spent + reserved + available = cap (available never negative).
    if (a.grandfathered === 0) expect(w.spent + w.reserved + Ledger.remaining(m.state, p, w.period)).toBe(w.cap)
  }
  // No window rows the model does not know about.
  for (const row of windows) expect(PERIODS as ReadonlyArray<string>).toContain(row.period)

  // Each reservation: same amount and state as the model, resolved at most once (resolved_at iff resolved).
  expect(reservations.length).toBe(m.state.reservations.size)
  const receiptsByRequest = new Map<string, Array<ReceiptRow>>()
  for (const rc of receipts) receiptsByRequest.set(rc.request_id, [...(receiptsByRequest.get(rc.request_id) ?? []), rc])
  const requestById = new Map(requests.map((q) => [q.id, q]))
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
    // The request row moves with its hold, in the same transaction: pending / completed / failed.
    const q = requestById.get(row.request_id)
    expect(q, `request row of ${row.id}`).toBeDefined()
    expect({ status: q!.status, reserved: q!.credits_reserved, charged: q!.credits_charged }).toEqual({
      status: { held: "pending", settled: "completed", voided: "failed" }[mr!.state],
      reserved: mr!.amount,
      charged: mr!.state === "held" ? null : (mr!.charge ?? 0)
    })
    // Exactly one receipt (and one debit) per charged request, none for a hold or a void.
    const rcs = receiptsByRequest.get(row.request_id) ?? []
    expect(rcs.length, `receipts for ${row.request_id}`).toBe(row.state === "settled" ? 1 : 0)
    if (row.state === "settled") {
      const body = JSON.parse(rcs[0]!.body) as { credits_charged: number; credits_reserved: number }
      expect([rcs[0]!.credits_charged, body.credits_charged, body.credits_reserved]).toEqual([mr!.charge, mr!.charge, mr!.amount])
    }
  }
  // No request rows without a reservation (a refused reservation rolled its request row back).
  expect(requests.length).toBe(reservations.length)
  expect(receipts.length).toBe([...m.state.reservations.values()].filter((x) => x.state === "settled").length)
}
