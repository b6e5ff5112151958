/**
 * Gateway model at the budget edge: a real Tollgate over HTTP (SQLite file and the store worker, or
 * PostgreSQL; assertion mode on) in front of the mock upstream, with SMALL budgets, so generated runs keep
 * meeting the edge — sends that fit, sends that shrink their output cap to fit, 402s, concurrent
 * sends racing for the last Credits, streams cut mid-way by the client or the upstream.
 *
 * Model = what a client can know: each charged (200) call's charge and request id, each 402, each
 * stream's request id. After every command (once every call has settled) the checks are the
 * rulebook's, per tenant: spent + reserved ≤ cap; Σ receipts = spent; nothing left held; every
 * 200's charge has its receipt, no 402 has one; the store's rows pass spec/ledger.ts
 * `checkLedgerRows` (window sums, one receipt per charge, the chain).
 */
import type fc from "fast-check"
import { expect } from "vitest"
import { checkLedgerRows } from "../../../spec/ledger.ts"
import type { TestGateway } from "../../support/gateway.ts"
import type { MockUpstream } from "../../support/mockUpstream.ts"
import type { Coverage } from "../support/coverage.ts"

export const PROMPTS = ["What is 2 + 2?", "Name a prime number and say why it is one, briefly."] as const
/** Prices (Credits per 1M tokens) that make a call cost tens of Credits: input 1/token, output 2/token. */
export const PRICES = { input: 1_000_000, output: 2_000_000 }

export interface Tenant {
  readonly projectId: string
  readonly key: string
  readonly cap: number
}

export interface BudgetModel {
  /** Per tenant: request id → charge of each 200. */
  readonly charged: Array<Map<string, number>>
  /** Per tenant: request ids that were refused with 402 (when the reply named one). */
  readonly refused: Array<Set<string>>
  /** Per tenant: request ids of streams (charged or not, settled however they ended). */
  readonly streams: Array<Set<string>>
}

export interface BudgetReal {
  readonly gw: TestGateway
  readonly upstream: MockUpstream
  readonly coverage: Coverage
  readonly tenants: ReadonlyArray<Tenant>
}

export type BudgetCommand = fc.AsyncCommand<BudgetModel, BudgetReal>

export const chatBody = (prompt: number, maxTokens: number | undefined, stream = false) => ({
  model: "auto",
  messages: [{ role: "user", content: PROMPTS[prompt] }],
  ...(maxTokens === undefined ? {} : { max_tokens: maxTokens }),
  ...(stream ? { stream: true } : {})
})

export interface Reply {
  readonly status: number
  readonly body: any
  readonly requestId: string | null
}

export const send = async (r: BudgetReal, tenant: number, body: unknown): Promise<Reply> => {
  const res = await fetch(`${r.gw.url}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${r.tenants[tenant]!.key}`, "content-type": "application/json" },
    body: JSON.stringify(body)
  })
  return { status: res.status, body: JSON.parse(await res.text()), requestId: res.headers.get("x-request-id") }
}

export const windowOf = async (r: BudgetReal, tenant: number): Promise<{ cap: number; spent: number; reserved: number; remaining: number }> => {
  const view = await r.gw.admin("GET", `/admin/v1/projects/${r.tenants[tenant]!.projectId}`)
  const w = view.body.current_window
  return { cap: w.budget_credits, spent: w.spent, reserved: w.reserved, remaining: w.remaining }
}

/** Record what a non-streamed reply tells the client, checking it is one of the two the edge allows. */
export const noteReply = (m: BudgetModel, r: BudgetReal, tenant: number, reply: Reply, remainingBefore?: number): void => {
  if (reply.status === 200) {
    const charge = reply.body.governance.credits_charged as number
    m.charged[tenant]!.set(reply.body.governance.request_id, charge)
    // A call never costs more than was left when it started (sequential sends know what that was).
    if (remainingBefore !== undefined) expect(charge).toBeLessThanOrEqual(remainingBefore)
    r.coverage.hit("Reply", "200")
  } else {
    expect(reply.status, JSON.stringify(reply.body)).toBe(402)
    expect(reply.body.error.code).toBe("budget_exceeded")
    if (reply.requestId !== null) m.refused[tenant]!.add(reply.requestId)
    // Refused only when even one output token would not fit in what was left.
    if (remainingBefore !== undefined) {
      const worst = Number(/worst-case cost of this request \((\d+) Credits\)/.exec(reply.body.error.message)?.[1] ?? NaN)
      expect(worst, reply.body.error.message).toBeGreaterThan(remainingBefore)
    }
    r.coverage.hit("Reply", "402")
  }
}

/** Poll until nothing of the tenant is held (a cut stream settles after its disconnect), up to 5 s. */
const settled = async (r: BudgetReal, tenant: number): Promise<void> => {
  const project = r.tenants[tenant]!.projectId
  const deadline = Date.now() + 5_000
  for (;;) {
    const [held] = r.gw.query<{ n: number }>("SELECT COUNT(*) AS n FROM reservations WHERE project_id = ? AND state = 'held'", project)
    if (held!.n === 0 || Date.now() > deadline) return
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

export const checkInvariants = async (m: BudgetModel, r: BudgetReal): Promise<void> => {
  for (const [t, tenant] of r.tenants.entries()) {
    await settled(r, t)
    const w = await windowOf(r, t)
    // The promise: never overspent, nothing stranded.
    expect(w.spent + w.reserved, `tenant ${t}: spent + reserved ≤ cap`).toBeLessThanOrEqual(tenant.cap)
    expect(w.reserved, `tenant ${t}: nothing left reserved`).toBe(0)
    const receipts = r.gw.query<{ request_id: string; project_id: string; period: string; seq: number; credits_charged: number; prev_hash: string; hash: string }>(
      "SELECT request_id, project_id, period, seq, credits_charged, prev_hash, hash FROM receipts WHERE project_id = ? ORDER BY seq",
      tenant.projectId
    )
    expect(receipts.reduce((a, x) => a + x.credits_charged, 0), `tenant ${t}: Σ receipts = spent`).toBe(w.spent)
    // Every 200 has its receipt with its charge; no 402 has one; streams have at most one.
    const byRequest = new Map(receipts.map((x) => [x.request_id, x.credits_charged]))
    for (const [id, charge] of m.charged[t]!) expect(byRequest.get(id), `receipt of ${id}`).toBe(charge)
    for (const id of m.refused[t]!) expect(byRequest.has(id), `402 ${id} has no receipt`).toBe(false)
    const known = new Set([...m.charged[t]!.keys(), ...m.streams[t]!])
    for (const x of receipts) expect(known.has(x.request_id), `receipt ${x.request_id} belongs to a call the client made`).toBe(true)
    // The rulebook's checkers over this tenant's rows.
    const windows = r.gw.query<{ project_id: string; period: string; spent: number; reserved: number }>("SELECT project_id, period, spent, reserved FROM budget_windows WHERE project_id = ?", tenant.projectId)
    const reservations = r.gw.query<{ id: string; request_id: string; project_id: string; period: string; amount: number; state: string; charge: number | null; created_at: number }>(
      "SELECT id, request_id, project_id, period, amount, state, charge, created_at FROM reservations WHERE project_id = ?",
      tenant.projectId
    )
    expect(
      checkLedgerRows({
        projects: [{ id: tenant.projectId, cap: tenant.cap }],
        windows: windows.map((x) => ({ project: x.project_id, period: x.period, spent: x.spent, reserved: x.reserved })),
        reservations: reservations.map((x) => ({ id: x.id, requestId: x.request_id, project: x.project_id, period: x.period, amount: x.amount, state: x.state, charge: x.charge, createdAt: x.created_at })),
        receipts: receipts.map((x) => ({ requestId: x.request_id, project: x.project_id, period: x.period, seq: x.seq, charge: x.credits_charged, prevHash: x.prev_hash, hash: x.hash }))
      })
    ).toEqual([])
  }
}
