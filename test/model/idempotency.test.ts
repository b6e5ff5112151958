/**
 * Model-based test of idempotency as production runs it — the claim, stored result and release inside
 * the store port's reserve / settle / abandon, in the store worker on a SQLite file and on PostgreSQL
 * (each engine of `modelEngines`, fewer runs on PostgreSQL outside test:deep), TestClock — against
 * spec/idempotency.ts.
 * Invariants after every command: every (scope, key, fingerprint) peeks exactly as the model claims —
 * so a replay returns the identical bytes and original request id, a conflict changed nothing, a
 * release freed the key, an expired record is gone — and no other live rows exist. Racing claims:
 * exactly one winner.
 */
import fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as Idem from "../../spec/idempotency.ts"
import { validIdempotencyKey } from "../../src/services/IdempotencyStore.ts"
import { AdvanceCommand } from "./idempotency/AdvanceCommand.ts"
import { ClaimCommand } from "./idempotency/ClaimCommand.ts"
import { ConcurrentClaimCommand } from "./idempotency/ConcurrentClaimCommand.ts"
import { FinishCommand } from "./idempotency/FinishCommand.ts"
import { CLAIM_TTL_MS, FINGERPRINTS, type IdemModel, type IdemReal, KEYS, RESULT_TTL_MS } from "./idempotency/model.ts"
import { ReleaseCommand } from "./idempotency/ReleaseCommand.ts"
import { assertProperty } from "./support/assert.ts"
import { Coverage } from "./support/coverage.ts"
import { maxCommands, pgPortRuns, pgScheduledRuns, portRuns, propertyTimeoutMs, scheduledRuns, serviceRuns } from "./support/profile.ts"
import { Effect } from "effect"
import { Projects } from "../../src/services/Projects.ts"
import { makeTimedPortRuntime, modelEngines, run, RuntimePool, type TimedPortRuntime, yieldBudgets } from "./support/runtime.ts"

const scope = fc.integer({ min: 0, max: 2 })
const key = fc.integer({ min: 0, max: KEYS.length - 1 })
const fp = fc.integer({ min: 0, max: FINGERPRINTS.length - 1 })
const pick = fc.nat({ max: 1_000 })

const commands = fc.commands(
  [
    fc.tuple(scope, key, fp).map(([s, k, f]) => new ClaimCommand(s, k, f)),
    fc.tuple(scope, key, fp).map(([s, k, f]) => new ClaimCommand(s, k, f)),
    fc.tuple(pick, fc.constantFrom(200, 400, 503), fc.string({ maxLength: 12 })).map(([i, st, b]) => new FinishCommand(i, st, `{"v":${JSON.stringify(b)}}`)),
    fc.tuple(pick, fc.constantFrom(200, 400, 503), fc.string({ maxLength: 12 })).map(([i, st, b]) => new FinishCommand(i, st, `{"v":${JSON.stringify(b)}}`)),
    pick.map((i) => new ReleaseCommand(i)),
    fc.constantFrom(1, 60_000, CLAIM_TTL_MS - 1, CLAIM_TTL_MS, RESULT_TTL_MS - CLAIM_TTL_MS, RESULT_TTL_MS).map((ms) => new AdvanceCommand(ms)),
    fc
      .tuple(scope, key, fc.array(fp, { minLength: 2, maxLength: 5 }), fc.constantFrom(...yieldBudgets))
      .map(([s, k, fs, y]) => new ConcurrentClaimCommand(s, k, fs, y))
  ],
  { maxCommands, size: "+1" }
)

let counter = 0
const setup = (pool: RuntimePool<TimedPortRuntime>, coverage: Coverage, scheduler?: fc.Scheduler) => async () => {
  const rt = pool.next()
  const n = ++counter
  coverage.runs++
  // Fresh projects per run: two environments of one project (same key, different scope) and another project.
  const [a, b] = await run(
    rt,
    Effect.flatMap(Projects, (p) => Effect.forEach(["a", "b"], (x) => Effect.map(p.create({ name: `idem-model-${x}`, budget_credits: 1_000, rate_limit: { requests_per_minute: 60 } }), (y) => y.id)))
  )
  const scopes = [
    { projectId: a!, environment: "development" },
    { projectId: a!, environment: "production" },
    { projectId: b!, environment: "development" }
  ]
  const real: IdemReal = { rt, coverage, scopes, calls: new Map(), scheduler, nextId: () => `im${n}_${++counter}` }
  return { model: { state: Idem.empty, claims: [] } satisfies IdemModel, real }
}

describe.each(modelEngines)("idempotency through the store port (%s) follows spec/idempotency.ts", (engine) => {
  const runs = engine === "pg" ? { port: pgPortRuns, scheduled: pgScheduledRuns } : { port: portRuns, scheduled: scheduledRuns }
  let rt: RuntimePool<TimedPortRuntime>
  beforeAll(() => {
    rt = new RuntimePool(() => makeTimedPortRuntime(engine))
  })
  afterAll(() => rt.dispose())

  it(
    "claim/finish/release/expiry: replay identical, conflict changes nothing, one winner per key",
    async () => {
      const coverage = new Coverage(`IdempotencyStore on ${engine} (asyncModelRun)`)
      await assertProperty("IdempotencyStore", fc.asyncProperty(commands, (cmds) => fc.asyncModelRun(setup(rt, coverage), cmds)), runs.port)
      coverage.print()
    },
    propertyTimeoutMs
  )

  it(
    "interleaved racing claims (scheduledModelRun): exactly one winner, the rest wait or conflict",
    async () => {
      const coverage = new Coverage(`IdempotencyStore on ${engine} (scheduledModelRun)`)
      await assertProperty(
        "IdempotencyStore scheduled",
        fc.asyncProperty(fc.scheduler(), fc.scheduler(), commands, (s, races, cmds) => fc.scheduledModelRun(s, setup(rt, coverage, races), cmds)),
        runs.scheduled
      )
      coverage.print()
    },
    propertyTimeoutMs
  )
})

describe("idempotency keys", () => {
  it("accepts exactly the idempotency keys the model accepts (1–255 printable ASCII)", () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ maxLength: 300 }), fc.stringMatching(/^[\x00-\x7f]{0,3}$/), fc.constantFrom(" ", " a", "a ", "", "x".repeat(255), "x".repeat(256))), (k) => {
        expect(validIdempotencyKey(k)).toBe(Idem.isValidKey(k))
      }),
      { numRuns: serviceRuns }
    )
  })
})
