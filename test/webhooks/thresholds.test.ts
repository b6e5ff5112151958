/**
 * The budget threshold trigger (migration 0012) against the rule it implements (spec/events.ts), on
 * SQLite and on PostgreSQL, as a property: for any cap, any thresholds an admin may set and any run
 * of settlements (spent only grows, never past the cap; several settlements may post as one UPDATE,
 * as a group commit does), the outbox holds exactly `emittedOverRun` — each threshold once per window
 * and scope, none early, none twice — and an UPDATE that only moves `reserved` emits nothing.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer, ManagedRuntime } from "effect"
import fc from "fast-check"
import { afterAll, describe, expect, it } from "vitest"
import { emittedOverRun, validThresholds } from "../../spec/events.ts"
import { makeSettings, Settings } from "../../src/domain/config.ts"
import { StoreDatabaseLive } from "../../src/store/Database.ts"
import { freshSchema, onEngines, type TestSchema } from "../support/pg.ts"

const engines = [
  ["sqlite", true, 200],
  ["pg", onEngines("test/webhooks/thresholds.test.ts on PostgreSQL", { pg: true }), 40]
] as const

/** A run: cap, thresholds, and the settlements' charges (each posted alone or with the next). */
const runs = fc
  .record({
    cap: fc.integer({ min: 1, max: 100_000 }),
    thresholds: fc.uniqueArray(fc.integer({ min: 1, max: 100 }), { minLength: 1, maxLength: 10 }),
    shares: fc.array(fc.tuple(fc.integer({ min: 0, max: 1000 }), fc.boolean()), { minLength: 1, maxLength: 25 })
  })
  .map(({ cap, thresholds, shares }) => {
    // Charges that never take spent past the cap: each a share of what is left.
    let spent = 0
    const posts: Array<number> = []
    let pending = 0
    for (const [share, alone] of shares) {
      const charge = Math.floor(((cap - spent) * share) / 1000)
      spent += charge
      pending += charge
      if (alone) {
        posts.push(pending)
        pending = 0
      }
    }
    if (pending > 0) posts.push(pending)
    return { cap, thresholds, posts }
  })

/**
 * Runs that end a post exactly on a threshold from inside the whole percent below it (49.5% → 50%,
 * 0.9% → 1%, 33.3% → 66.7% past 34%), and one that moves within a whole percent: always tried first,
 * for PostgreSQL's early exit on an unmoved whole percent (migration 0027) as much as for the rule.
 */
const boundaries = [
  { cap: 200, thresholds: [50], posts: [99, 1] },
  { cap: 1000, thresholds: [1, 2], posts: [9, 1, 9, 1] },
  { cap: 3, thresholds: [34], posts: [1, 1] },
  { cap: 100_000, thresholds: [10], posts: [9_990, 5, 4, 1] }
]

describe.each(engines)("threshold events on %s", (engine, enabled, numRuns) => {
  let schema: TestSchema | undefined
  afterAll(() => schema?.drop())

  it.runIf(enabled)("each threshold once per window and scope: the outbox holds exactly spec/events.ts's emittedOverRun", async () => {
    schema = engine === "pg" ? freshSchema() : undefined
    const settings = makeSettings({ databaseUrl: schema?.url ?? "sqlite::memory:" })
    const runtime = ManagedRuntime.make(StoreDatabaseLive.pipe(Layer.provide(Layer.succeed(Settings, settings))))
    let n = 0
    try {
      await fc.assert(
        fc.asyncProperty(runs, async ({ cap, thresholds, posts }) => {
          expect(validThresholds(thresholds)).toBe(true)
          const project = `prj_prop${n++}`
          const period = "2026-11"
          const found = await runtime.runPromise(
            Effect.gen(function* () {
              const sql = yield* SqlClient.SqlClient
              yield* sql`INSERT INTO projects (id, organization, name, budget_credits, requests_per_minute, burst, alert_thresholds_percent, created_at, updated_at)
                VALUES (${project}, 'org_p', 'p', ${cap}, 60, 10, ${JSON.stringify(thresholds)}, 0, 0)`
              yield* sql`INSERT INTO budget_windows (project_id, period, spent, reserved) VALUES (${project}, ${period}, 0, 0)`
              yield* sql`UPDATE budget_windows SET reserved = reserved + ${cap} WHERE project_id = ${project}` // a hold: no event
              for (const charge of posts) yield* sql`UPDATE budget_windows SET spent = spent + ${charge} WHERE project_id = ${project} AND period = ${period}`
              return yield* sql<{ type: string; data: string; cause: string }>`SELECT type, data, cause FROM events WHERE project_id = ${project} ORDER BY seq`
            })
          )
          let spent = 0
          const spents = posts.map((c) => (spent += c))
          const expected = emittedOverRun(spents, cap, thresholds)
          expect(found.every((e) => e.type === "budget.threshold_reached")).toBe(true)
          const got = found.map((e) => JSON.parse(e.data) as { threshold_percent: number; scope: string; cap: number; period: string })
          expect(got.map((d) => Number(d.threshold_percent)).sort((a, b) => a - b)).toEqual(expected)
          for (const d of got) expect([d.scope, Number(d.cap), d.period]).toEqual(["project", cap, period])
          expect(new Set(found.map((e) => e.cause)).size).toBe(found.length)
        }),
        { numRuns, examples: boundaries.map((b) => [b] as [typeof b]) }
      )
    } finally {
      await runtime.dispose()
    }
  }, 120_000)

  it.runIf(enabled)("a key's and an end user's window (migration 0018): the same rule, with the scope's own cap; a scope without a cap emits nothing", async () => {
    schema ??= engine === "pg" ? freshSchema() : undefined
    const settings = makeSettings({ databaseUrl: schema?.url ?? "sqlite::memory:" })
    const runtime = ManagedRuntime.make(StoreDatabaseLive.pipe(Layer.provide(Layer.succeed(Settings, settings))))
    // Where the scope's cap comes from: the key's own, an end user's override, the project's default
    // for its end users, or nowhere (an uncapped key).
    const kinds = fc.constantFrom("key", "end_user override", "end_user default", "uncapped key")
    let n = 0
    try {
      await fc.assert(
        fc.asyncProperty(runs, kinds, async ({ cap, thresholds, posts }, kind) => {
          const project = `prj_scope${n}`
          const key = `key_scope${n++}`
          const period = "2026-11"
          const isKey = kind === "key" || kind === "uncapped key"
          const scope = isKey ? `key:${key}` : `end_user:${project}/ann/ö`
          const found = await runtime.runPromise(
            Effect.gen(function* () {
              const sql = yield* SqlClient.SqlClient
              // The project's own cap never binds here; only the scope's does.
              yield* sql`INSERT INTO projects (id, organization, name, budget_credits, requests_per_minute, burst, alert_thresholds_percent, created_at, updated_at, end_user_budget_credits)
                VALUES (${project}, 'org_p', 'p', 1000000000, 60, 10, ${JSON.stringify(thresholds)}, 0, 0, ${kind === "end_user default" ? cap : kind === "end_user override" ? cap * 7 : null})`
              yield* sql`INSERT INTO api_keys (id, project_id, environment, secret_sha256, created_at, budget_credits)
                VALUES (${key}, ${project}, 'development', 'x', 0, ${kind === "key" ? cap : null})`
              if (kind === "end_user override") yield* sql`INSERT INTO end_users (project_id, end_user, budget_credits, created_at, updated_at) VALUES (${project}, 'ann/ö', ${cap}, 0, 0)`
              yield* sql`INSERT INTO scope_windows (scope, period, spent, reserved) VALUES (${scope}, ${period}, 0, ${cap})`
              for (const charge of posts) yield* sql`UPDATE scope_windows SET spent = spent + ${charge} WHERE scope = ${scope} AND period = ${period}`
              return yield* sql<{ type: string; data: string; cause: string }>`SELECT type, data, cause FROM events WHERE project_id = ${project} ORDER BY seq`
            })
          )
          let spent = 0
          const expected = kind === "uncapped key" ? [] : emittedOverRun(posts.map((c) => (spent += c)), cap, thresholds)
          const got = found.map((e) => JSON.parse(e.data) as { threshold_percent: number; scope: string; scope_id: string; cap: number; period: string })
          expect(got.map((d) => Number(d.threshold_percent)).sort((a, b) => a - b)).toEqual(expected)
          for (const d of got) expect([d.scope, d.scope_id, Number(d.cap), d.period]).toEqual([isKey ? "key" : "end_user", isKey ? key : "ann/ö", cap, period])
          expect(new Set(found.map((e) => e.cause)).size).toBe(found.length)
        }),
        { numRuns, examples: boundaries.flatMap((b): Array<[typeof b, string]> => [[b, "key"], [b, "end_user override"]]) }
      )
    } finally {
      await runtime.dispose()
    }
  }, 120_000)
})
