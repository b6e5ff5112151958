/**
 * Model-based test of the KeyRegistry (SQLite, TestClock) against spec/keys.ts: create, rotate with
 * grace, revoke, and — after every command — authentication of every key issued (right secret, forged
 * secret, wrong environment) and its admin status.
 */
import { Effect } from "effect"
import fc from "fast-check"
import { afterAll, beforeAll, describe, it } from "vitest"
import * as Keys from "../../spec/keys.ts"
import { Projects } from "../../src/services/Projects.ts"
import { AdvanceCommand } from "./keys/AdvanceCommand.ts"
import { CreateCommand } from "./keys/CreateCommand.ts"
import type { KeysModel, KeysReal } from "./keys/model.ts"
import { RevokeCommand } from "./keys/RevokeCommand.ts"
import { RotateCommand } from "./keys/RotateCommand.ts"
import { assertProperty } from "./support/assert.ts"
import { Coverage } from "./support/coverage.ts"
import { maxCommands, propertyTimeoutMs, serviceRuns } from "./support/profile.ts"
import { makeServicesRuntime, run, RuntimePool } from "./support/runtime.ts"

const pick = fc.nat({ max: 1_000 })
const commands = fc.commands(
  [
    fc.tuple(fc.integer({ min: 0, max: 1 }), fc.integer({ min: 0, max: 2 })).map(([p, e]) => new CreateCommand(p, e)),
    fc.tuple(pick, fc.oneof(fc.constantFrom(0, 1, 2, 30, Keys.DEFAULT_GRACE_SECONDS), fc.constantFrom(-1, 0.5))).map(([i, g]) => new RotateCommand(i, g)),
    fc.tuple(pick, fc.constantFrom(0, 1, 2, 30, Keys.DEFAULT_GRACE_SECONDS)).map(([i, g]) => new RotateCommand(i, g)),
    pick.map((i) => new RevokeCommand(i)),
    fc.constantFrom(1, 500, 999, 1_000, 1_001, 2_000, 30_000, 86_400_000).map((ms) => new AdvanceCommand(ms))
  ],
  { maxCommands, size: "+1" }
)

describe("KeyRegistry follows spec/keys.ts", () => {
  let pool: RuntimePool
  beforeAll(() => {
    pool = new RuntimePool(makeServicesRuntime)
  })
  afterAll(() => pool.dispose())

  it(
    "create/rotate/revoke: a key authenticates iff the model says Valid, as its own tenant",
    async () => {
      const coverage = new Coverage("KeyRegistry (asyncModelRun)")
      await assertProperty(
        "KeyRegistry",
        fc.asyncProperty(commands, (cmds) =>
          fc.asyncModelRun(async () => {
            const rt = pool.next()
            coverage.runs++
            const projects = await run(
              rt,
              Effect.flatMap(Projects, (p) => Effect.forEach([0, 1], (i) => Effect.map(p.create({ name: `keys-model-${i}`, budget_credits: 0, rate_limit: { requests_per_minute: 60 } }), (x) => x.id)))
            )
            const real: KeysReal = { rt, coverage, projects, tokens: new Map() }
            return { model: { state: Keys.empty, ids: [] } satisfies KeysModel, real }
          }, cmds)
        ),
        serviceRuns
      )
      coverage.print()
    },
    propertyTimeoutMs
  )
})
