/**
 * Adaptive shedding on a PostgreSQL lane (docs/decisions/0051), through the store port on a real
 * database: a reservation is shed for waiting on its lane past TOLLGATE_PG_MAX_WAIT_MS
 * *beyond the database's own time for a statement* (the fastest of the lane's last few). When the
 * database itself is slower than the bound, the calls that waited only for the statement in flight
 * are sent — a batch a statement keeps flowing — instead of every queued call being shed. (A stuck
 * statement, one far slower than the ones before it, still sheds what queued behind it:
 * test/start/overload.test.ts, "a lane".)
 *
 * The database is made slow by a trigger of the test's own on its schema: every hold placed on the
 * budget row sleeps 250 ms (2.5 × the 100 ms bound). No timed assertion: the sleeps only need to be
 * longer than the bound.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Exit } from "effect"
import { describe, expect, it } from "vitest"
import { Projects } from "../../src/services/Projects.ts"
import { pgShed } from "../../src/store/pgChatStore.ts"
import { reserveArgs } from "../support/portArgs.ts"
import { onEngines } from "../support/pg.ts"
import { pgStoreForSuite } from "../support/pgStoreSuite.ts"

const MAX_WAIT_MS = 100
const SLOW_HOLD_S = 0.25

describe.runIf(onEngines("test/store/pgLaneFlow.test.ts"))("adaptive shedding on a PostgreSQL lane", () => {
  const suite = pgStoreForSuite({ pgPoolSize: 6, pgMaxWaitMs: MAX_WAIT_MS, pgLockTimeoutMs: 60_000, pgMaxQueued: 10_000 })

  const newProject = () =>
    suite.node.runPromise(Effect.flatMap(Projects, (p) => p.create({ name: "flow", organization: "org_flow", budget_credits: 1_000_000, rate_limit: { requests_per_minute: 60, burst: 10 } })))
  const sql = (run: (sql: SqlClient.SqlClient) => Effect.Effect<unknown, unknown>) => suite.node.runPromise(Effect.flatMap(SqlClient.SqlClient, run) as Effect.Effect<unknown>)

  it("a database slower than TOLLGATE_PG_MAX_WAIT_MS keeps serving a batch a statement instead of shedding every queued call", async () => {
    const project = await newProject()
    await suite.node.runPromise(suite.store.reserve(reserveArgs(project.id, 10))) // the window's row exists from here
    await sql(
      (sql) =>
        sql.unsafe(`CREATE FUNCTION slow_hold() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN IF NEW.reserved > OLD.reserved THEN PERFORM pg_sleep(${SLOW_HOLD_S}); END IF; RETURN NEW; END $$`)
    )
    await sql((sql) => sql`CREATE TRIGGER slow_hold BEFORE UPDATE ON budget_windows FOR EACH ROW EXECUTE FUNCTION slow_hold()`)
    // The lane learns what a statement takes now (each alone: nothing waits, nothing is shed).
    for (let i = 0; i < 4; i++) await suite.node.runPromise(suite.store.reserve(reserveArgs(project.id, 10)))
    const shedBefore = pgShed.waited
    // A burst: the first goes alone; the other nine wait for it (≈ 250 ms, past the 100 ms bound).
    const exits = await Promise.all(Array.from({ length: 10 }, () => suite.node.runPromise(Effect.exit(suite.store.reserve(reserveArgs(project.id, 10))))))
    const held = exits.filter(Exit.isSuccess).length
    console.log(`lane flow (slow database): a burst of 10 on a lane whose statements take ≥ ${SLOW_HOLD_S * 1000} ms, bound ${MAX_WAIT_MS} ms: ${held} held, ${pgShed.waited - shedBefore} shed`)
    expect({ held, shed: pgShed.waited - shedBefore }).toEqual({ held: 10, shed: 0 })
    await sql((sql) => sql`DROP TRIGGER slow_hold ON budget_windows`)
    const [w] = (await sql((sql) => sql`SELECT reserved FROM budget_windows WHERE project_id = ${project.id}`)) as Array<{ reserved: number }>
    expect(Number(w!.reserved)).toBe(15 * 10)
  })
})
