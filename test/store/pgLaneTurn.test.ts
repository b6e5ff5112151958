/**
 * A lane's turn on PostgreSQL (migration 0025, docs/decisions/0054), through the store port on a real
 * database: the settlements and reservations queued on a lane go in ONE statement, `tollgate_turn` —
 *
 * - settlements first: a reservation in the same turn is judged on the room its settlements freed;
 * - the hot-row bound holds for the reservations alone: a lock not had within it sheds them (503,
 *   nothing held: no hold, no request row, no claim), and the turn's settlements still commit;
 * - an idle lane sends once the event loop's pass has run: calls that arrive together go together.
 *
 * The lane is made busy by a trigger of the test's own: a hold placed on one project's budget row sleeps
 * 300 ms, and the test waits until PostgreSQL reports that statement asleep (pg_stat_activity) before it
 * queues the calls that must share the next turn. No timed assertion.
 */
import { SqlClient } from "@effect/sql"
import { Cause, Effect, Exit } from "effect"
import { describe, expect, it } from "vitest"
import { Projects } from "../../src/services/Projects.ts"
import { pgReserveBatches, pgShed, pgTurns } from "../../src/store/pgChatStore.ts"
import { pgRoundTrips } from "../../src/store/pgPool.ts"
import { reserveArgs, settleArgs } from "../support/portArgs.ts"
import { onEngines } from "../support/pg.ts"
import { pgStoreForSuite } from "../support/pgStoreSuite.ts"

const LOCK_TIMEOUT_MS = 300

describe.runIf(onEngines("test/store/pgLaneTurn.test.ts"))("a lane's turn on PostgreSQL: settlements and reservations in one statement", () => {
  const suite = pgStoreForSuite({ pgPoolSize: 6, pgLanes: 1, pgLockTimeoutMs: LOCK_TIMEOUT_MS, pgMaxWaitMs: 60_000, pgMaxQueued: 10_000 })

  const run: (typeof suite)["node"]["runPromise"] = (effect) => suite.node.runPromise(effect)
  const newProject = (budget: number) =>
    run(Effect.flatMap(Projects, (p) => p.create({ name: "turn", organization: "org_turn", budget_credits: budget, rate_limit: { requests_per_minute: 60, burst: 10 } })))
  const query = <A>(run_: (sql: SqlClient.SqlClient) => Effect.Effect<ReadonlyArray<A>, unknown>) =>
    suite.node.runPromise(Effect.flatMap(SqlClient.SqlClient, run_) as Effect.Effect<ReadonlyArray<A>>)

  /** Until PostgreSQL shows `n` statements asleep whose text holds `like`. */
  const untilAsleep = async (like: string, n = 1) => {
    for (;;) {
      const [row] = await query<{ n: number }>((sql) => sql`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query LIKE ${`%${like}%`}`)
      if (row!.n >= n) return
      await new Promise((r) => setTimeout(r, 10))
    }
  }

  /** A project whose next holds each sleep 300 ms in the database: a reservation of it keeps the lane busy. */
  const slowProject = async () => {
    const slow = await newProject(1_000_000)
    await run(suite.store.reserve(reserveArgs(slow.id, 1))) // its window's row exists from here (the trigger fires on UPDATE)
    await query((sql) =>
      sql.unsafe(`CREATE OR REPLACE FUNCTION slow_turn() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.project_id = '${slow.id}' AND NEW.reserved > OLD.reserved THEN PERFORM pg_sleep(0.3); END IF; RETURN NEW; END $$`)
    )
    await query((sql) => sql.unsafe(`CREATE OR REPLACE TRIGGER slow_turn BEFORE UPDATE ON budget_windows FOR EACH ROW EXECUTE FUNCTION slow_turn()`))
    return slow
  }
  const window = async (projectId: string) => {
    const [w] = await query<{ spent: number; reserved: number }>((sql) => sql`SELECT spent, reserved FROM budget_windows WHERE project_id = ${projectId}`)
    return { spent: Number(w!.spent), reserved: Number(w!.reserved) }
  }

  it("settles before it reserves: a reservation that fits only once the turn's settlement freed its hold is held", async () => {
    const project = await newProject(100)
    // One call settled first, so this instance knows the project's chain head (a turn sealed on an
    // unknown head writes nothing of its settlements and answers the head).
    const earlier = reserveArgs(project.id, 5)
    await run(suite.store.reserve(earlier))
    await run(suite.store.settle(settleArgs(earlier, 5, 5)))
    const first = reserveArgs(project.id, 85)
    await run(suite.store.reserve(first)) // 5 spent + 85 held of 100
    const slow = await slowProject()
    const turnsBefore = pgTurns.turns

    const busy = run(suite.store.reserve(reserveArgs(slow.id, 1)))
    await untilAsleep("tollgate_re")
    // Queued together behind the busy statement: the settlement (charge 5, freeing 85) and a
    // reservation of 50 — which fits only after the settlement (10 + 50 ≤ 100, not 5 + 85 + 50).
    const settled = run(Effect.exit(suite.store.settle(settleArgs(first, 85, 5))))
    const second = run(Effect.exit(suite.store.reserve(reserveArgs(project.id, 50))))
    await busy
    const [s, r] = await Promise.all([settled, second])

    expect(Exit.isSuccess(s)).toBe(true)
    expect(Exit.isSuccess(r) ? "held" : Cause.pretty(r.cause).split("\n")[0]).toBe("held")
    expect(pgTurns.turns - turnsBefore).toBeGreaterThanOrEqual(1)
    expect(await window(project.id)).toEqual({ spent: 10, reserved: 50 })
    await query((sql) => sql`DROP TRIGGER slow_turn ON budget_windows`)
  })

  it("a lock not had within the bound sheds the turn's reservations alone: nothing of them held, its settlements committed", async () => {
    const settling = await newProject(1_000)
    const hot = await newProject(1_000)
    const toSettle = reserveArgs(settling.id, 40)
    await run(suite.store.reserve(toSettle))
    await run(suite.store.reserve(reserveArgs(hot.id, 1))) // the hot project's window row exists
    const slow = await slowProject()
    const shedBefore = pgShed.lock
    const turnsBefore = pgTurns.turns

    // Another session holds the hot project's window row past the bound (1 s against 300 ms).
    const holder = query((sql) =>
      sql.withTransaction(Effect.zipRight(sql`SELECT 1 FROM budget_windows WHERE project_id = ${hot.id} FOR UPDATE`, sql`SELECT pg_sleep(1) AS held_row`))
    )
    await untilAsleep("held_row")
    const busy = run(suite.store.reserve(reserveArgs(slow.id, 1)))
    await untilAsleep("tollgate_re")
    const shedArgs = reserveArgs(hot.id, 5, { claim: { key: "turn-shed", fingerprint: "f" } })
    const settled = run(Effect.exit(suite.store.settle(settleArgs(toSettle, 40, 25))))
    const shed = run(Effect.exit(suite.store.reserve(shedArgs)))
    await busy
    const [s, r] = await Promise.all([settled, shed])
    await holder

    expect(Exit.isSuccess(s)).toBe(true)
    expect(Exit.isFailure(r) && Cause.failureOption(r.cause).pipe((f) => f._tag === "Some" && (f.value as { _tag: string })._tag)).toBe("Shed")
    expect(pgShed.lock - shedBefore).toBe(1)
    expect(pgTurns.turns - turnsBefore).toBeGreaterThanOrEqual(1)
    // The settlement committed; nothing of the shed reservation exists.
    expect(await window(settling.id)).toEqual({ spent: 25, reserved: 0 })
    expect(await window(hot.id)).toEqual({ spent: 0, reserved: 1 })
    const left = await query<{ holds: number; requests: number; claims: number }>(
      (sql) => sql`SELECT (SELECT count(*)::int FROM reservations WHERE id = ${shedArgs.hold.reservationId}) AS holds,
        (SELECT count(*)::int FROM requests WHERE id = ${shedArgs.request.id}) AS requests,
        (SELECT count(*)::int FROM idempotency WHERE key = 'turn-shed') AS claims`
    )
    expect(left[0]).toEqual({ holds: 0, requests: 0, claims: 0 })
    const [receipts] = await query<{ n: number }>((sql) => sql`SELECT count(*)::int AS n FROM receipts WHERE project_id = ${settling.id}`)
    expect(receipts!.n).toBe(1)
    await query((sql) => sql`DROP TRIGGER slow_turn ON budget_windows`)
  })

  it("a statement's reservations of several projects are each judged on their own project's cap (migration 0028: the cap read once a window)", async () => {
    // Two roomy projects and two tight ones; the batch walks them in project-id order, so whichever
    // comes first, a cap carried over from one window to the next would hold a tight project's 50 or
    // refuse a roomy one's.
    const roomy = [await newProject(1_000), await newProject(1_000)]
    const tight = [await newProject(40), await newProject(40)]
    const batches = pgReserveBatches.batches
    const reserves = [...roomy, ...tight].map((p) => run(Effect.exit(suite.store.reserve(reserveArgs(p.id, 50)))))
    const exits = await Promise.all(reserves)
    expect(pgReserveBatches.batches - batches).toBe(1)
    const outcome = (e: (typeof exits)[number]) => (Exit.isSuccess(e) ? "held" : Cause.failureOption(e.cause).pipe((f) => (f._tag === "Some" ? f.value._tag : "died")))
    expect(exits.map(outcome)).toEqual(["held", "held", "OverBudget", "OverBudget"])
    for (const p of roomy) expect(await window(p.id)).toEqual({ spent: 0, reserved: 50 })
    for (const p of tight) expect(await window(p.id)).toEqual({ spent: 0, reserved: 0 })
  })

  it("an idle lane's calls that arrive in one pass of the event loop go in one statement, not the first alone", async () => {
    const project = await newProject(1_000_000)
    await run(suite.store.reserve(reserveArgs(project.id, 1))) // the window's row exists
    const trips = pgRoundTrips.roundTrips
    const batches = pgReserveBatches.batches
    // 16 reservations begun in the same pass (as the callers one committed turn resumes arrive together).
    const exits = await Promise.all(Array.from({ length: 16 }, () => run(Effect.exit(suite.store.reserve(reserveArgs(project.id, 1))))))
    expect(exits.every(Exit.isSuccess)).toBe(true)
    expect({ statements: pgRoundTrips.roundTrips - trips, batches: pgReserveBatches.batches - batches }).toEqual({ statements: 1, batches: 1 })
    expect(await window(project.id)).toEqual({ spent: 0, reserved: 17 })
  })
})
