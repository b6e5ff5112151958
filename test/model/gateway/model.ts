/**
 * Gateway-level model run: a real Tollgate over HTTP (SQLite file) in front of the mock upstream.
 * Each run gets two fresh tenants (projects + development keys via the admin API). The model is what
 * a client can know: per (tenant, idempotency key) the payload first sent and the exact bytes it got,
 * the Credits each charged request cost, and how many upstream calls there must have been.
 *
 * Invariants after every command, per tenant: spent = Σ charges the model saw; nothing left reserved;
 * exactly one receipt per charged request and no other; upstream calls = requests that ran.
 */
import type Database from "better-sqlite3"
import type fc from "fast-check"
import { expect } from "vitest"
import type { TestGateway } from "../../support/gateway.ts"
import type { MockUpstream } from "../../support/mockUpstream.ts"
import type { Coverage } from "../support/coverage.ts"

export const IDEMPOTENCY_KEYS = ["order-1", "order-2"] as const
export const PROMPTS = ["What is 2 + 2?", "Name a prime number."] as const

export interface Tenant {
  readonly projectId: string
  readonly key: string
}

export interface Sent {
  readonly prompt: number
  readonly status: number
  readonly bytes: string
  readonly requestId: string
}

export interface GatewayModel {
  /** `${tenant}/${idempotency key}` → the first completed exchange. */
  readonly exchanges: Map<string, Sent>
  /** Charged request ids per tenant, with their charge. */
  readonly charges: Array<Map<string, number>>
  upstreamCalls: number
}

export interface GatewayReal {
  readonly gw: TestGateway
  readonly upstream: MockUpstream
  readonly db: Database.Database
  readonly coverage: Coverage
  readonly tenants: ReadonlyArray<Tenant>
  /** Upstream calls before this run started (the mock counts across runs). */
  readonly baselineCalls: number
  /** Distinct per run, so idempotency keys of different runs never meet. */
  readonly runTag: string
}

export type GatewayCommand = fc.AsyncCommand<GatewayModel, GatewayReal>

export interface Reply {
  readonly status: number
  readonly bytes: string
  readonly headers: Headers
}

export const chatBody = (r: GatewayReal, prompt: number, idempotencyKey: string | undefined) => ({
  model: "auto",
  max_tokens: 32,
  messages: [{ role: "user", content: PROMPTS[prompt] }],
  ...(idempotencyKey === undefined ? {} : { metadata: { idempotency_key: `${r.runTag}-${idempotencyKey}` } })
})

export const post = async (r: GatewayReal, tenant: number, body: unknown): Promise<Reply> => {
  const res = await fetch(`${r.gw.url}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${r.tenants[tenant]!.key}`, "content-type": "application/json" },
    body: JSON.stringify(body)
  })
  return { status: res.status, bytes: await res.text(), headers: res.headers }
}

export const get = async (r: GatewayReal, tenant: number, path: string): Promise<{ status: number; bytes: string }> => {
  const res = await fetch(`${r.gw.url}${path}`, { headers: { authorization: `Bearer ${r.tenants[tenant]!.key}` } })
  return { status: res.status, bytes: await res.text() }
}

export const governanceOf = (bytes: string): { request_id: string; credits_charged: number; receipt_id: string } =>
  (JSON.parse(bytes) as { governance: { request_id: string; credits_charged: number; receipt_id: string } }).governance

export const checkInvariants = async (m: GatewayModel, r: GatewayReal): Promise<void> => {
  expect(r.upstream.calls - r.baselineCalls, "upstream calls").toBe(m.upstreamCalls)
  for (const [t, tenant] of r.tenants.entries()) {
    const view = await r.gw.admin("GET", `/admin/v1/projects/${tenant.projectId}`)
    const charges = m.charges[t]!
    const total = [...charges.values()].reduce((a, b) => a + b, 0)
    expect({ tenant: t, spent: view.body.current_window.spent, reserved: view.body.current_window.reserved }).toEqual({ tenant: t, spent: total, reserved: 0 })
    const receipts = r.db.prepare("SELECT request_id, credits_charged FROM receipts WHERE project_id = ? ORDER BY seq").all(tenant.projectId) as Array<{ request_id: string; credits_charged: number }>
    // Exactly one receipt (one debit) per charged request, and none for anything else.
    expect(receipts.map((x) => [x.request_id, x.credits_charged]).sort()).toEqual([...charges.entries()].sort())
  }
}
