/**
 * The ceiling of one hot project on PostgreSQL: reservations and settlements per second through the
 * store port (src/store/pgChatStore.ts), every call on ONE project (one budget row, one chain head),
 * from 1 or 2 "instances" (each its own pool and signing key, in this process), closed loop.
 *
 *   scripts/services.sh && npx tsx bench/pgHotProject.ts [--seconds 5] [--concurrency 16] [--instances 1]
 *
 * Each transaction is one statement, a function of migration 0008 (docs/decisions/0043): a reservation
 * one round trip, a settlement one — sealed on the chain head this instance last saw, so one project's
 * settlements go through one lane of the instance, `SETTLE_BATCH` at a time, each lane's call one
 * commit (with fsync on, a WAL flush). It reports the round trips (= statements) and pool checkouts a
 * governed call (reserve + settle) cost. On a shared 2-core box the figures are about cost, not scale.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { Projects } from "../src/services/Projects.ts"
import { ChatStore } from "../src/store/ChatStore.ts"
import { pgRetries, pgSettleBatches } from "../src/store/pgChatStore.ts"
import { pgRoundTrips } from "../src/store/pgPool.ts"
import { freshSchema } from "../test/support/pg.ts"
import { makePgStoreNode } from "../test/support/pgStoreNode.ts"
import { reserveArgs, settleArgs } from "../test/support/portArgs.ts"

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`)
  return i === -1 ? fallback : Number(process.argv[i + 1])
}
const seconds = arg("seconds", 5)
const concurrency = arg("concurrency", 16)
const instances = arg("instances", 1)

const schema = freshSchema()
const node = () => makePgStoreNode(schema.url, { pgPoolSize: 10 })
const nodes = Array.from({ length: instances }, node)
try {
  const project = await nodes[0]!.runPromise(
    Effect.flatMap(Projects, (p) => p.create({ name: "hot", organization: "org_bench", budget_credits: 1e15, rate_limit: { requests_per_minute: 60, burst: 10 } }))
  )
  for (const n of nodes.slice(1)) await n.runPromise(ChatStore)
  let reserves = 0
  let settles = 0
  const reserveMs: Array<number> = []
  const settleMs: Array<number> = []
  const end = Date.now() + seconds * 1000
  const loop = async (rt: (typeof nodes)[number]) => {
    while (Date.now() < end) {
      const args = reserveArgs(project.id, 10)
      let t = performance.now()
      await rt.runPromise(Effect.flatMap(ChatStore, (s) => s.reserve(args)))
      reserveMs.push(performance.now() - t)
      reserves++
      t = performance.now()
      await rt.runPromise(Effect.flatMap(ChatStore, (s) => s.settle(settleArgs(args, 10, 7))))
      settleMs.push(performance.now() - t)
      settles++
    }
  }
  const started = Date.now()
  const counted = { ...pgRoundTrips }
  await Promise.all(Array.from({ length: concurrency }, (_, i) => loop(nodes[i % nodes.length]!)))
  const elapsed = (Date.now() - started) / 1000
  // Each round trip is one statement (node-postgres sends a statement's parse, bind and execute in one exchange).
  const perCall = (n: number) => Number((n / Math.max(1, settles)).toFixed(2))
  const roundTripsPerCall = perCall(pgRoundTrips.roundTrips - counted.roundTrips)
  const checkoutsPerCall = perCall(pgRoundTrips.checkouts - counted.checkouts)
  const p = (xs: Array<number>, q: number) => xs.sort((a, b) => a - b)[Math.floor(q * (xs.length - 1))]!.toFixed(1)
  const [w] = await nodes[0]!.runPromise(
    Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ spent: number; reserved: number }>`SELECT spent, reserved FROM budget_windows WHERE project_id = ${project.id}`)
  )
  console.log(
    JSON.stringify({
      instances,
      concurrency,
      seconds: elapsed,
      reservationsPerSecond: Math.round(reserves / elapsed),
      settlementsPerSecond: Math.round(settles / elapsed),
      governedCallsPerSecond: Math.round(settles / elapsed),
      reserveMs: { p50: p(reserveMs, 0.5), p99: p(reserveMs, 0.99) },
      settleMs: { p50: p(settleMs, 0.5), p99: p(settleMs, 0.99) },
      roundTripsPerCall,
      checkoutsPerCall,
      settleBatches: { ...pgSettleBatches, meanSize: Number((pgSettleBatches.settlements / Math.max(1, pgSettleBatches.batches)).toFixed(1)) },
      retries: pgRetries,
      check: { spent: w!.spent, expected: settles * 7, reserved: w!.reserved }
    })
  )
} finally {
  for (const n of nodes) await n.dispose()
  schema.drop()
}
