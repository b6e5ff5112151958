/**
 * Model-based test of the money path as production runs it — the store port's reserve / settle /
 * abandon (src/store/ChatStore.ts) in the store worker on a SQLite file, and on PostgreSQL — against
 * spec/ledger.ts (on each engine of `modelEngines`, fewer runs on PostgreSQL outside test:deep).
 * Invariants after every command: the service's windows equal the model's accounts; no overspend;
 * conservation (spent + reserved + available = cap); each reservation resolved at most once; exactly
 * one receipt (debit) per settled reservation, none otherwise; debits sum to spent; contiguous chain.
 */
import { Effect } from "effect"
import fc from "fast-check"
import { afterAll, beforeAll, describe, it } from "vitest"
import * as Ledger from "../../spec/ledger.ts"
import { Projects } from "../../src/services/Projects.ts"
import { ConcurrentReserveCommand } from "./ledger/ConcurrentReserveCommand.ts"
import type { LedgerModel, LedgerReal } from "./ledger/model.ts"
import { ReserveCommand } from "./ledger/ReserveCommand.ts"
import { SetCapCommand } from "./ledger/SetCapCommand.ts"
import { SettleCommand } from "./ledger/SettleCommand.ts"
import { VoidCommand } from "./ledger/VoidCommand.ts"
import { assertProperty } from "./support/assert.ts"
import { Coverage } from "./support/coverage.ts"
import { maxCommands, pgPortRuns, pgScheduledRuns, portRuns, propertyTimeoutMs, scheduledRuns } from "./support/profile.ts"
import { makePortRuntime, modelEngines, type PortRuntime, run, RuntimePool, yieldBudgets } from "./support/runtime.ts"

const project = fc.integer({ min: 0, max: 1 })
const period = fc.integer({ min: 0, max: 1 })
const cap = fc.oneof(fc.integer({ min: 0, max: 1_000 }), fc.constantFrom(0, 1, 100))
const amount = fc.oneof(fc.integer({ min: 0, max: 400 }), fc.constantFrom(0, 1, 100, 1_000))
const pick = fc.nat({ max: 1_000 })
const yieldBudget = fc.constantFrom(...yieldBudgets)

const commands = fc.commands(
  [
    fc.tuple(project, cap).map(([p, c]) => new SetCapCommand(p, c)),
    fc.tuple(project, period, amount).map(([p, t, a]) => new ReserveCommand(p, t, a)),
    fc.tuple(project, period, amount).map(([p, t, a]) => new ReserveCommand(p, t, a)),
    fc.tuple(pick, fc.oneof(fc.integer({ min: 0, max: 400 }), fc.constant(0))).map(([i, c]) => new SettleCommand(i, c)),
    fc.tuple(pick, fc.integer({ min: 0, max: 400 })).map(([i, c]) => new SettleCommand(i, c)),
    pick.map((i) => new VoidCommand(i)),
    fc
      .tuple(project, period, fc.array(amount, { minLength: 2, maxLength: 5 }), yieldBudget)
      .map(([p, t, as, y]) => new ConcurrentReserveCommand(p, t, as, y))
  ],
  { maxCommands, size: "+1" }
)

let counter = 0
const setup = (pool: RuntimePool<PortRuntime>, coverage: Coverage, caps: readonly [number, number], scheduler?: fc.Scheduler) => async () => {
  const rt = pool.next()
  const projects = await run(
    rt,
    Effect.flatMap(Projects, (p) => Effect.forEach(caps, (c, i) => Effect.map(p.create({ name: `ledger-model-${i}`, budget_credits: c, rate_limit: { requests_per_minute: 60 } }), (x) => x.id)))
  )
  let model: Ledger.LedgerState = Ledger.empty
  for (const [i, c] of caps.entries()) model = Ledger.setCap(model, projects[i]!, c, "2026-11").state
  coverage.runs++
  const real: LedgerReal = { rt, coverage, projects, holds: new Map(), scheduler, nextId: () => `lm${++counter}` }
  return { model: { state: model } satisfies LedgerModel, real }
}

describe.each(modelEngines)("the store port's money path (%s) follows spec/ledger.ts", (engine) => {
  const runs = engine === "pg" ? { port: pgPortRuns, scheduled: pgScheduledRuns } : { port: portRuns, scheduled: scheduledRuns }
  let rt: RuntimePool<PortRuntime>
  beforeAll(() => {
    rt = new RuntimePool(() => makePortRuntime(engine))
  })
  afterAll(() => rt.dispose())

  it(
    "sequential commands: no overspend, conservation, resolved at most once, one receipt per charge",
    async () => {
      const coverage = new Coverage(`Ledger on ${engine} (asyncModelRun)`)
      await assertProperty(
        "Ledger",
        fc.asyncProperty(fc.tuple(cap, cap), commands, (caps, cmds) => fc.asyncModelRun(setup(rt, coverage, caps), cmds)),
        runs.port
      )
      coverage.print()
    },
    propertyTimeoutMs
  )

  it(
    "interleaved concurrent reservations (scheduledModelRun) stay linearizable and never overspend",
    async () => {
      const coverage = new Coverage(`Ledger on ${engine} (scheduledModelRun)`)
      await assertProperty(
        "Ledger scheduled",
        fc.asyncProperty(fc.scheduler(), fc.scheduler(), fc.tuple(cap, cap), commands, (s, races, caps, cmds) =>
          fc.scheduledModelRun(s, setup(rt, coverage, caps, races), cmds)
        ),
        runs.scheduled
      )
      coverage.print()
    },
    propertyTimeoutMs
  )
})
