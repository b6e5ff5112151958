/**
 * Gateway-level model run: the real HTTP gateway + mock upstream (see gateway/model.ts). Fewer runs
 * than the service-level models (each command is several HTTP round trips): 25 in the fast profile,
 * 300 in the deep one (TOLLGATE_GATEWAY_RUNS overrides).
 */
import Database from "better-sqlite3"
import fc from "fast-check"
import { afterAll, beforeAll, describe, it } from "vitest"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { ConcurrentSendCommand } from "./gateway/ConcurrentSendCommand.ts"
import { CrossTenantReadCommand } from "./gateway/CrossTenantReadCommand.ts"
import type { GatewayModel, GatewayReal, Tenant } from "./gateway/model.ts"
import { SendCommand } from "./gateway/SendCommand.ts"
import { assertProperty } from "./support/assert.ts"
import { Coverage } from "./support/coverage.ts"
import { gatewayRuns, propertyTimeoutMs } from "./support/profile.ts"

const tenant = fc.integer({ min: 0, max: 1 })
const key = fc.integer({ min: 0, max: 1 })
const prompt = fc.integer({ min: 0, max: 1 })
const commands = fc.commands(
  [
    fc.tuple(tenant, key, prompt).map(([t, k, p]) => new SendCommand(t, k, p)),
    fc.tuple(tenant, key, prompt).map(([t, k, p]) => new SendCommand(t, k, p)),
    fc.tuple(tenant, prompt).map(([t, p]) => new SendCommand(t, undefined, p)),
    fc.tuple(tenant, key, prompt, fc.integer({ min: 2, max: 6 }), fc.constantFrom(20, 60)).map(([t, k, p, n, d]) => new ConcurrentSendCommand(t, k, p, n, d)),
    fc.tuple(tenant, fc.nat({ max: 100 })).map(([t, i]) => new CrossTenantReadCommand(t, i))
  ],
  { maxCommands: 12, size: "+1" }
)

describe("the governed HTTP path follows the idempotency, ledger and tenancy models", () => {
  let upstream: MockUpstream
  let gw: TestGateway
  let db: Database.Database
  let runs = 0
  beforeAll(async () => {
    upstream = await startMockUpstream({ record: false })
    gw = await startGateway(mockGatewayFile(upstream.url), { inflightWaitMs: 10_000 })
    db = gw.db()
  })
  afterAll(async () => {
    await gw.close()
    await upstream.close()
  })

  it(
    "replay is identical and free, conflict changes nothing, N concurrent → one upstream call, tenants are sealed",
    async () => {
      const coverage = new Coverage("Gateway over HTTP (asyncModelRun)")
      await assertProperty(
        "Gateway",
        fc.asyncProperty(commands, (cmds) =>
          fc.asyncModelRun(async () => {
            const run = ++runs
            coverage.runs++
            const tenants: Array<Tenant> = []
            for (const i of [0, 1]) {
              const p = await gw.admin("POST", "/admin/v1/projects", { name: `gw-model-${run}-${i}`, budget_credits: 1_000_000_000, rate_limit: { requests_per_minute: 1_000_000, burst: 1_000_000 } })
              const k = await gw.admin("POST", `/admin/v1/projects/${p.body.id}/keys`, { environment: "development" })
              tenants.push({ projectId: p.body.id, key: k.body.secret })
            }
            const real: GatewayReal = { gw, upstream, db, coverage, tenants, baselineCalls: upstream.calls, runTag: `run${run}-${Date.now()}` }
            return { model: { exchanges: new Map(), charges: [new Map(), new Map()], upstreamCalls: 0 } satisfies GatewayModel, real }
          }, cmds)
        ),
        gatewayRuns
      )
      coverage.print()
    },
    propertyTimeoutMs
  )
})
