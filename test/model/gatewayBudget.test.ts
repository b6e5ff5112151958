/**
 * Gateway model at the budget edge (see gatewayBudget/model.ts): small budgets, concurrent sends,
 * 402s, streams cut mid-way, over HTTP on the real gateway (SQLite file and store worker, and
 * PostgreSQL with fewer runs; assertion mode) — checking spent + reserved ≤ cap and Σ receipts =
 * spent after every command.
 */
import fc from "fast-check"
import { afterAll, beforeAll, describe, it } from "vitest"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { ConcurrentSendsCommand } from "./gatewayBudget/ConcurrentSendsCommand.ts"
import { type BudgetModel, type BudgetReal, PRICES, type Tenant } from "./gatewayBudget/model.ts"
import { SendCommand } from "./gatewayBudget/SendCommand.ts"
import { StreamCommand } from "./gatewayBudget/StreamCommand.ts"
import { assertProperty } from "./support/assert.ts"
import { Coverage } from "./support/coverage.ts"
import { gatewayRuns, pgGatewayRuns, propertyTimeoutMs } from "./support/profile.ts"
import { modelEngines } from "./support/runtime.ts"
import { freshSchema, type TestSchema } from "../support/pg.ts"

const tenant = fc.integer({ min: 0, max: 1 })
const prompt = fc.integer({ min: 0, max: 1 })
/** max_tokens: none (the gateway sizes the output cap to the budget left), small, large. */
const maxTokens = fc.constantFrom(undefined, undefined, 4, 16, 64)
/** Budgets around a few calls' worth (a call costs ≈ 15–30 Credits of input plus 2 per output token). */
const cap = fc.oneof(fc.integer({ min: 0, max: 1_000 }), fc.constantFrom(0, 20, 40, 100, 300))
const end = fc.oneof(
  fc.constant({ _tag: "Full" as const }),
  fc.integer({ min: 1, max: 4 }).map((n) => ({ _tag: "ClientCut" as const, afterChunks: n })),
  fc.integer({ min: 0, max: 3 }).map((n) => ({ _tag: "UpstreamCut" as const, afterChunks: n }))
)

const commands = fc.commands(
  [
    fc.tuple(tenant, prompt, maxTokens).map(([t, p, x]) => new SendCommand(t, p, x)),
    fc.tuple(tenant, prompt, maxTokens).map(([t, p, x]) => new SendCommand(t, p, x)),
    fc.tuple(tenant, fc.array(prompt, { minLength: 2, maxLength: 6 }), maxTokens).map(([t, ps, x]) => new ConcurrentSendsCommand(t, ps, x)),
    fc.tuple(tenant, prompt, maxTokens, end).map(([t, p, x, e]) => new StreamCommand(t, p, x, e))
  ],
  { maxCommands: 10, size: "+1" }
)

describe.each(modelEngines)("the governed HTTP path at the budget edge (%s) never overspends and charges each call once", (engine) => {
  let upstream: MockUpstream
  let gw: TestGateway
  let schema: TestSchema | undefined
  let runs = 0
  beforeAll(async () => {
    upstream = await startMockUpstream({ record: false })
    schema = engine === "pg" ? freshSchema() : undefined
    gw = await startGateway(mockGatewayFile(upstream.url, undefined, { "gpt-test": PRICES }), {
      inflightWaitMs: 10_000,
      ...(schema === undefined ? {} : { databaseUrl: schema.url })
    })
  })
  afterAll(async () => {
    await gw.close()
    await upstream.close()
    schema?.drop()
  })

  it(
    "small budgets, concurrent sends, 402s, cut streams: spent + reserved ≤ cap and Σ receipts = spent after every command",
    async () => {
      const coverage = new Coverage(`Gateway at the budget edge on ${engine} (asyncModelRun)`)
      await assertProperty(
        "Gateway budget edge",
        fc.asyncProperty(fc.tuple(cap, cap), commands, (caps, cmds) =>
          fc.asyncModelRun(async () => {
            const run = ++runs
            coverage.runs++
            upstream.reset()
            const tenants: Array<Tenant> = []
            for (const [i, c] of caps.entries()) {
              const p = await gw.admin("POST", "/admin/v1/projects", { name: `gw-budget-${run}-${i}`, budget_credits: c, rate_limit: { requests_per_minute: 1_000_000, burst: 1_000_000 } })
              const k = await gw.admin("POST", `/admin/v1/projects/${p.body.id}/keys`, { environment: "development" })
              tenants.push({ projectId: p.body.id, key: k.body.secret, cap: c })
            }
            const real: BudgetReal = { gw, upstream, coverage, tenants }
            return { model: { charged: [new Map(), new Map()], refused: [new Set(), new Set()], streams: [new Set(), new Set()] } satisfies BudgetModel, real }
          }, cmds)
        ),
        engine === "pg" ? pgGatewayRuns : gatewayRuns
      )
      coverage.print()
    },
    propertyTimeoutMs
  )
})
