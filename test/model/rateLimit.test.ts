/**
 * Model-based test of the RateLimiter (TestClock) against spec/rateLimit.ts (GCRA).
 * Every decision, remaining count, reset and Retry-After equals the model's; invariant after every
 * command: admitted requests ≤ burst + rate·t over every interval.
 */
import fc from "fast-check"
import { afterAll, beforeAll, describe, it } from "vitest"
import { AdmitCommand } from "./rateLimit/AdmitCommand.ts"
import { AdvanceCommand } from "./rateLimit/AdvanceCommand.ts"
import { BurstCommand } from "./rateLimit/BurstCommand.ts"
import type { RateModel, RateReal } from "./rateLimit/model.ts"
import { assertProperty } from "./support/assert.ts"
import { Coverage } from "./support/coverage.ts"
import { maxCommands, propertyTimeoutMs, serviceRuns } from "./support/profile.ts"
import { makeServicesRuntime, RuntimePool } from "./support/runtime.ts"

const project = fc.integer({ min: 0, max: 1 })
const limit = fc.record({
  requestsPerMinute: fc.oneof(fc.integer({ min: 1, max: 600 }), fc.constantFrom(1, 7, 60, 61, 6_000, 1_000_000)),
  burst: fc.oneof(fc.integer({ min: 1, max: 10 }), fc.constantFrom(1, 100))
})

const commands = fc.commands(
  [
    project.map((p) => new AdmitCommand(p)),
    project.map((p) => new AdmitCommand(p)),
    project.map((p) => new AdmitCommand(p)),
    fc.oneof(fc.integer({ min: 0, max: 2_000 }), fc.constantFrom(1, 999, 1_000, 60_000, 3_600_000)).map((ms) => new AdvanceCommand(ms)),
    fc.tuple(project, fc.integer({ min: 2, max: 12 })).map(([p, n]) => new BurstCommand(p, n))
  ],
  { maxCommands, size: "+1" }
)

let counter = 0
describe("RateLimiter follows spec/rateLimit.ts", () => {
  let pool: RuntimePool
  beforeAll(() => {
    pool = new RuntimePool(makeServicesRuntime)
  })
  afterAll(() => pool.dispose())

  it(
    "admit matches GCRA; admitted ≤ burst + rate·t",
    async () => {
      const coverage = new Coverage("RateLimiter (asyncModelRun)")
      await assertProperty(
        "RateLimiter",
        fc.asyncProperty(fc.tuple(limit, limit), commands, (limits, cmds) =>
          fc.asyncModelRun(() => {
            const rt = pool.next()
            const run = ++counter
            coverage.runs++
            const real: RateReal = { rt, coverage, projects: [`prj_rl${run}a`, `prj_rl${run}b`], limits }
            return { model: { tat: new Map(), admittedAtMicros: new Map() } satisfies RateModel, real }
          }, cmds)
        ),
        serviceRuns
      )
      coverage.print()
    },
    propertyTimeoutMs
  )
})
