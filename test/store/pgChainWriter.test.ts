/**
 * One writer of a project's receipt chain at a time on PostgreSQL (migration 0026,
 * docs/decisions/0056), through the store port on a real database:
 *
 * - every settlement takes the chain's writer lock first: while another transaction holds it, a
 *   settlement of the project waits (PostgreSQL shows it waiting on the advisory lock) and moves no
 *   head; once it is released the settlement commits on the head as it then is;
 * - a contended project (its head moved by another instance) settles a big batch under the lock,
 *   sealed on the head read there: it never finds the head moved, however stale this instance's view,
 *   and a turn that carries reservations too commits both;
 * - two instances settling one project at once, one of them under the lock, leave one chain in order
 *   and whole books;
 * - a holder that stops between its statements loses its session, and the lock, after
 *   `CHAIN_HOLDER_IDLE_MS` idle in its transaction: the waiting settlement then commits;
 * - settlements whose head had moved go back to their lane's queue once and go with its next turn,
 *   in one statement with the reservations that queued meanwhile (docs/decisions/0058).
 *
 * Nothing is asserted on how fast anything runs: the tests wait for what PostgreSQL reports
 * (pg_stat_activity), bounded only so a broken lock fails a test instead of hanging it; the idle-bound
 * case checks that the waiting settlement did not commit before the bound, never after how long.
 */
import { SqlClient } from "@effect/sql"
import { Deferred, Effect, Exit } from "effect"
import { describe, expect, it } from "vitest"
import { Projects } from "../../src/services/Projects.ts"
import type { ReserveArgs, SettleArgs } from "../../src/store/chatTransactions.ts"
import { ChatStore } from "../../src/store/ChatStore.ts"
import { CHAIN_HOLDER_IDLE_MS } from "../../src/store/migrationsChainWriter.ts"
import { pgSettleBatches, pgTurns } from "../../src/store/pgChatStore.ts"
import { GENESIS_HASH } from "../../spec/receipt.ts"
import { reserveArgs, settleArgs } from "../support/portArgs.ts"
import { onEngines } from "../support/pg.ts"
import { makePgStoreNode } from "../support/pgStoreNode.ts"
import { pgStoreForSuite } from "../support/pgStoreSuite.ts"

/** Settlements a contended batch needs to go under the lock (pgChatStore's LOCKED_FIRST_BATCH). */
const BIG = 20

describe.runIf(onEngines("test/store/pgChainWriter.test.ts"))("one writer of a project's receipt chain at a time on PostgreSQL", () => {
  const suite = pgStoreForSuite({ pgPoolSize: 8, pgLanes: 1, assertInvariants: true })

  const run: (typeof suite)["node"]["runPromise"] = (effect) => suite.node.runPromise(effect)
  const newProject = () =>
    run(Effect.flatMap(Projects, (p) => p.create({ name: "chain", organization: "org_chain", budget_credits: 1_000_000, rate_limit: { requests_per_minute: 60, burst: 10 } })))
  const query = <A>(q: (sql: SqlClient.SqlClient) => Effect.Effect<ReadonlyArray<A>, unknown>) =>
    suite.node.runPromise(Effect.flatMap(SqlClient.SqlClient, q) as Effect.Effect<ReadonlyArray<A>>)

  /** Until PostgreSQL shows a statement waiting on an advisory lock whose text holds `like` (false after 10 s). */
  const untilWaitingOnAdvisory = async (like: string): Promise<boolean> => {
    for (let i = 0; i < 1000; i++) {
      const [row] = await query<{ n: number }>(
        (sql) => sql`SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND query LIKE ${`%${like}%`}`
      )
      if (row!.n > 0) return true
      await new Promise((r) => setTimeout(r, 10))
    }
    return false
  }

  /** The project's chain (seq 1..n, each prev_hash the hash before it) and books (Σ receipts = spent, nothing held but `held`). */
  const checkChain = async (projectId: string, held = 0) => {
    const receipts = await query<{ seq: number; prev_hash: string; hash: string; credits_charged: number }>(
      (sql) => sql`SELECT seq, prev_hash, hash, credits_charged FROM receipts WHERE project_id = ${projectId} ORDER BY seq`
    )
    receipts.forEach((r, i) => {
      expect(Number(r.seq)).toBe(i + 1)
      expect(r.prev_hash).toBe(i === 0 ? GENESIS_HASH : receipts[i - 1]!.hash)
    })
    const [w] = await query<{ spent: number; reserved: number }>((sql) => sql`SELECT spent, reserved FROM budget_windows WHERE project_id = ${projectId}`)
    expect(Number(w!.spent)).toBe(receipts.reduce((a, r) => a + Number(r.credits_charged), 0))
    expect(Number(w!.reserved)).toBe(held)
    const [head] = await query<{ seq: number; hash: string }>((sql) => sql`SELECT seq, hash FROM chain_heads WHERE project_id = ${projectId}`)
    expect({ seq: Number(head!.seq), hash: head!.hash }).toEqual({ seq: receipts.length, hash: receipts.at(-1)!.hash })
    return receipts.length
  }

  type Node = { readonly store: (typeof suite)["store"]; readonly run: (typeof suite)["node"]["runPromise"] }
  const reserveOn = (node: Node, projectId: string) => async () => {
    const r = reserveArgs(projectId, 10)
    await node.run(node.store.reserve(r))
    return r
  }
  const settledOn = (node: Node, r: ReserveArgs, charge = 3) => node.run(node.store.settle(settleArgs(r, 10, charge)))
  /** Settlements handed to `node`'s lane in one pass of the event loop: they go as one batch. */
  const settleTogether = (node: Node, rs: ReadonlyArray<ReserveArgs>, charge = 3) =>
    Promise.all(rs.map((r) => new Promise<Exit.Exit<void>>((resolve) => node.store.settleThen!(settleArgs(r, 10, charge) as SettleArgs, resolve))))

  /**
   * Another writer's transaction: it takes `projectId`'s chain lock (as an instance's locked path does),
   * then runs `then`. Answers the heads it read under the lock once it has them, and how it ended.
   */
  const holdingChain = async (projectId: string, then: (sql: SqlClient.SqlClient) => Effect.Effect<unknown, unknown>) => {
    const taken = await run(Deferred.make<Record<string, { seq: number }>>())
    const ended = run(
      Effect.exit(
        Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql.withTransaction(
            Effect.gen(function* () {
              const [row] = yield* sql<{ h: Record<string, { seq: number }> }>`SELECT tollgate_lock_chains(${JSON.stringify([{ project_id: projectId }])}::jsonb) AS h`
              yield* Deferred.succeed(taken, row!.h)
              yield* then(sql)
            })
          )
        )
      )
    )
    return { heads: await run(Deferred.await(taken)), ended }
  }

  /**
   * A new project on two instances — this suite's store (a) and another node on the same schema (b) —
   * with a's view of the chain head stale: a settled once, then b moved the head. Runs `body`, then
   * ends b.
   */
  const withMovedHead = async (body: (a: Node, b: Node, projectId: string) => Promise<void>) => {
    const project = await newProject()
    const other = makePgStoreNode(suite.schema.url, { pgPoolSize: 8, pgLanes: 1, assertInvariants: true })
    try {
      const a: Node = { store: suite.store, run }
      const b: Node = { store: await other.runPromise(ChatStore), run: (e) => other.runPromise(e as never) }
      await settledOn(a, await reserveOn(a, project.id)())
      await settledOn(b, await reserveOn(b, project.id)())
      await body(a, b, project.id)
    } finally {
      await other.dispose()
    }
  }

  it("a settlement waits for the chain's writer lock another transaction holds, and then extends the head as it is", async () => {
    const project = await newProject()
    const a: Node = { store: suite.store, run }
    await settledOn(a, await reserveOn(a, project.id)())
    const second = await reserveOn(a, project.id)()

    // Another writer takes the chain's lock and keeps it until released.
    const release = await run(Deferred.make<void>())
    const writer = await holdingChain(project.id, () => Deferred.await(release))
    let settling: Promise<void> | undefined
    try {
      expect(writer.heads[project.id]!.seq).toBe(1)
      let settled = false
      settling = settledOn(a, second).then(() => void (settled = true))
      expect(await untilWaitingOnAdvisory("tollgate_")).toBe(true)
      expect(settled).toBe(false)
      const [head] = await query<{ seq: number }>((sql) => sql`SELECT seq FROM chain_heads WHERE project_id = ${project.id}`)
      expect(Number(head!.seq)).toBe(1)
    } finally {
      // Released whatever happened above, so a failing case does not leave the lock and its transaction behind.
      await run(Deferred.succeed(release, undefined))
    }
    expect(Exit.isSuccess(await writer.ended)).toBe(true)
    await settling
    expect(await checkChain(project.id)).toBe(2)
  })

  it("a holder that stops between its statements loses its session, and the chain's lock with it, after the idle bound", async () => {
    const project = await newProject()
    const a: Node = { store: suite.store, run }
    await settledOn(a, await reserveOn(a, project.id)())
    const next = await reserveOn(a, project.id)()

    // A writer that takes the chain's lock and then sends nothing for longer than the bound (frozen, or cut off).
    const stalled = await holdingChain(project.id, (sql) => Effect.zipRight(Effect.sleep(`${CHAIN_HOLDER_IDLE_MS + 2000} millis`), sql`SELECT 1`))
    const started = Date.now()
    const settled = await Promise.race([
      settledOn(a, next).then(() => "settled" as const),
      new Promise<"still waiting">((r) => setTimeout(() => r("still waiting"), CHAIN_HOLDER_IDLE_MS + 5000))
    ])
    expect(settled).toBe("settled")
    expect(Date.now() - started).toBeGreaterThanOrEqual(CHAIN_HOLDER_IDLE_MS - 500)
    expect(Exit.isFailure(await stalled.ended)).toBe(true)
    expect(await checkChain(project.id)).toBe(2)
  }, 30_000)

  it("a contended project's big batch is sealed on the head read under the lock: no head found moved, however stale this instance's view; a turn with reservations commits both", () =>
    withMovedHead(async (a, b, projectId) => {
      const project = { id: projectId }
      // a's next settlement finds the head b moved: the project is contended for a.
      const moved0 = pgSettleBatches.headMoved
      await settledOn(a, await reserveOn(a, project.id)())
      expect(pgSettleBatches.headMoved - moved0).toBe(1)

      // b moves the head again; a's view is stale. a's big batch goes under the lock and finds nothing moved.
      const holdsA = await Promise.all(Array.from({ length: BIG }, reserveOn(a, project.id)))
      const holdsB = await Promise.all(Array.from({ length: 4 }, reserveOn(b, project.id)))
      expect((await settleTogether(b, holdsB)).every(Exit.isSuccess)).toBe(true)
      const moved = pgSettleBatches.headMoved
      const locked = pgSettleBatches.locked
      expect((await settleTogether(a, holdsA)).every(Exit.isSuccess)).toBe(true)
      expect(pgSettleBatches.locked - locked).toBe(1)
      expect(pgSettleBatches.headMoved - moved).toBe(0)

      // A turn: a's settlements and reservations handed to its lane together, after b moved the head again.
      const more = await Promise.all(Array.from({ length: BIG }, reserveOn(a, project.id)))
      await settledOn(b, await reserveOn(b, project.id)())
      const [turns, lockedBefore, movedBefore] = [pgTurns.turns, pgSettleBatches.locked, pgSettleBatches.headMoved]
      const reserving = Array.from({ length: 4 }, () => reserveArgs(project.id, 10))
      const [settledA, reservedA] = await Promise.all([settleTogether(a, more), Promise.all(reserving.map((r) => run(Effect.exit(suite.store.reserve(r)))))])
      expect([settledA.every(Exit.isSuccess), reservedA.every(Exit.isSuccess)]).toEqual([true, true])
      expect([pgTurns.turns - turns, pgSettleBatches.locked - lockedBefore, pgSettleBatches.headMoved - movedBefore]).toEqual([1, 1, 0])

      // Both instances settling big batches at once: a under the lock, b sealing on what it last saw.
      const again = await Promise.all(Array.from({ length: BIG }, reserveOn(a, project.id)))
      const holdsB2 = await Promise.all(Array.from({ length: BIG }, reserveOn(b, project.id)))
      await settledOn(b, await reserveOn(b, project.id)()) // moved again: a stays contended
      const both = await Promise.all([settleTogether(a, again), settleTogether(b, holdsB2)])
      expect(both.flat().every(Exit.isSuccess)).toBe(true)
      expect(await checkChain(project.id, 4 * 10)).toBe(3 + 4 + BIG + 1 + BIG + 1 + BIG + BIG)
    }))

  it("settlements that find their head moved go back to the lane's queue once and go with its next turn: the reservations queued meanwhile in the same statement", () =>
    withMovedHead(async (a, _b, projectId) => {
      const project = { id: projectId }
      // a's next settlement is sealed on the head it knows, which b has moved.
      const stale = await reserveOn(a, project.id)()

      // Another writer holds the chain's lock, so a's turn (the settlement and a reservation) waits in
      // PostgreSQL while two more reservations queue on a's lane behind it.
      const release = await run(Deferred.make<void>())
      const writer = await holdingChain(project.id, () => Deferred.await(release))
      const [turns, moved, requeued] = [pgTurns.turns, pgSettleBatches.headMoved, pgSettleBatches.requeued]
      let first: Promise<[Exit.Exit<void>, Exit.Exit<unknown, unknown>]> | undefined
      let behind: Promise<ReadonlyArray<Exit.Exit<unknown, unknown>>> | undefined
      try {
        first = Promise.all([
          new Promise<Exit.Exit<void>>((resolve) => a.store.settleThen!(settleArgs(stale, 10, 3) as SettleArgs, resolve)),
          run(Effect.exit(a.store.reserve(reserveArgs(project.id, 10))))
        ])
        expect(await untilWaitingOnAdvisory("tollgate_turn")).toBe(true)
        behind = Promise.all(Array.from({ length: 2 }, () => run(Effect.exit(a.store.reserve(reserveArgs(project.id, 10))))))
      } finally {
        await run(Deferred.succeed(release, undefined))
      }
      expect(Exit.isSuccess(await writer.ended)).toBe(true)
      const [settled, reserved] = await first!
      expect([Exit.isSuccess(settled), Exit.isSuccess(reserved), (await behind!).every(Exit.isSuccess)]).toEqual([true, true, true])
      // The first turn found the head moved and wrote no receipt; the settlement went back once, and the
      // lane's next turn carried it with the two reservations: two turns, no statement of its own.
      expect([pgTurns.turns - turns, pgSettleBatches.headMoved - moved, pgSettleBatches.requeued - requeued]).toEqual([2, 1, 1])
      expect(await checkChain(project.id, 30)).toBe(3)
    }), 30_000)
})
