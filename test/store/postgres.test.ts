/**
 * The PostgreSQL store on the real engine, with several instances on one database: each "instance"
 * here is the gateway's whole service graph (ServicesLive) with its own connection pool and its own
 * receipt signing key, as separate processes would have. Runs in `npm test` whenever PostgreSQL
 * answers (scripts/services.sh starts it); under CI=true it must run, so an unreachable server fails.
 *
 * What it holds the store to, racing instances against one hot project:
 * - one migration and one default project when instances start together on an empty database;
 * - never overspent: spent + reserved ≤ cap, and the guard refuses what does not fit;
 * - one charge per hold, one receipt per charge, one hash chain per project, every receipt verifying
 *   with a public key every instance serves;
 * - one idempotency claim wins across instances;
 * - a sweep run by every instance at once voids each expired hold exactly once;
 * - a transaction aborted by a deadlock (40P01) runs again and commits once, counted in /metrics;
 * - money and times are BIGINT, read back as exact numbers.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Either, Layer, ManagedRuntime, Option, Redacted } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { GENESIS_HASH, type Receipt, verifyReceipt } from "../../spec/receipt.ts"
import { type GatewaySettings, makeSettings, Settings } from "../../src/domain/config.ts"
import { KeyRegistry } from "../../src/services/KeyRegistry.ts"
import { ServicesLive } from "../../src/server.ts"
import { Bootstrap } from "../../src/services/Bootstrap.ts"
import { Instance as InstanceEpoch } from "../../src/services/Instance.ts"
import { Ledger } from "../../src/services/Ledger.ts"
import { Recovery } from "../../src/services/Recovery.ts"
import { Projects } from "../../src/services/Projects.ts"
import { ReceiptSigner } from "../../src/services/ReceiptSigner.ts"
import { ChatStore } from "../../src/store/ChatStore.ts"
import { pgRetries } from "../../src/store/pgChatStore.ts"
import { Metrics } from "../../src/services/Metrics.ts"
import pg from "pg"
import { migrationSteps } from "../../src/store/migrations.ts"
import type { ReserveArgs } from "../../src/store/chatTransactions.ts"
import { freshSchema, onEngines, type TestSchema } from "../support/pg.ts"
import { DEFAULT_NOW, reserveArgs, settleArgs } from "../support/portArgs.ts"


const dirs: Array<string> = []
const schemas: Array<TestSchema> = []
const runtimes: Array<ManagedRuntime.ManagedRuntime<any, any>> = []
afterAll(async () => {
  for (const rt of runtimes) await rt.dispose()
  for (const s of schemas) s.drop()
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

/** One instance: the whole service graph on `url`, its own pool (small, as three share the box) and its own signing key. */
const instance = (url: string, overrides: Partial<GatewaySettings> = {}) => {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-pg-"))
  dirs.push(dir)
  const settings = makeSettings({
    databaseUrl: url,
    pgPoolSize: 4,
    assertInvariants: true,
    receiptKeyFile: Option.some(join(dir, "receipt-signing-key.pem")),
    adminToken: Option.some(Redacted.make("test-admin-token")),
    ...overrides
  })
  const rt = ManagedRuntime.make(ServicesLive.pipe(Layer.provideMerge(Layer.succeed(Settings, settings))))
  runtimes.push(rt)
  return rt
}

type Instance = ReturnType<typeof instance>

/** A fresh schema and `n` instances on it, started together. */
const cluster = async (n: number, overrides: Partial<GatewaySettings> = {}) => {
  const schema = freshSchema()
  schemas.push(schema)
  const nodes = Array.from({ length: n }, () => instance(schema.url, overrides))
  const started = await Promise.all(nodes.map((rt) => rt.runPromise(Bootstrap)))
  return { schema, nodes, started }
}

const query = <T extends object>(rt: Instance, text: string, ...params: Array<unknown>) =>
  rt.runPromise(Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe<T>(text, params as Array<any>)).pipe(Effect.orDie))

const newProject = (rt: Instance, budget: number) =>
  rt.runPromise(
    Effect.flatMap(Projects, (p) => p.create({ name: "hot", organization: "org_test", budget_credits: budget, rate_limit: { requests_per_minute: 60, burst: 10 } }))
  )

const reserve = (rt: Instance, args: ReserveArgs) => rt.runPromise(Effect.either(Effect.flatMap(ChatStore, (s) => s.reserve(args))))

describe.runIf(onEngines("test/store/postgres.test.ts"))("PostgreSQL store, several instances on one database", () => {
  it("instances starting together on an empty database migrate it once and create exactly one default project", async () => {
    const { nodes, started } = await cluster(3)
    expect(started.filter((b) => b.firstStart !== undefined)).toHaveLength(1)
    const projects = await query<{ id: string }>(nodes[0]!, "SELECT id FROM projects")
    expect(projects).toEqual([{ id: started.find((b) => b.firstStart !== undefined)!.firstStart!.projectId }])
    const migrations = await query<{ n: number }>(nodes[1]!, "SELECT COUNT(*) AS n FROM effect_sql_migrations")
    expect(migrations[0]!.n).toBe(Object.keys(migrationSteps).length)
    expect(await query(nodes[2]!, "SELECT value FROM settings WHERE name = 'default_project'")).toEqual([{ value: projects[0]!.id }])
  })

  it("one hot project, three instances reserving and settling at once: never overspent, one charge per hold, one hash chain", async () => {
    const { nodes } = await cluster(3)
    const cap = 1_000
    const project = await newProject(nodes[0]!, cap)
    // 3 × 40 holds of 9 Credits want 1,080: the cap must bite.
    const attempts = nodes.flatMap((rt) => Array.from({ length: 40 }, () => ({ rt, args: reserveArgs(project.id, 9) })))
    const outcomes = await Promise.all(attempts.map(({ rt, args }) => reserve(rt, args)))
    const held = attempts.filter((_, i) => Either.isRight(outcomes[i]!))
    const refused = outcomes.filter(Either.isLeft)
    for (const r of refused) expect(r.left._tag).toBe("OverBudget")
    expect(refused.length).toBeGreaterThan(0)
    expect(held.length).toBe(Math.floor(cap / 9))
    const [w1] = await query<{ spent: number; reserved: number }>(nodes[0]!, "SELECT spent, reserved FROM budget_windows WHERE project_id = $1", project.id)
    expect(w1).toEqual({ spent: 0, reserved: held.length * 9 })

    // Each hold settled by another instance than the one that made it, all at once: charges 1..9.
    const charges = held.map((_, i) => 1 + (i % 9))
    await Promise.all(
      held.map(({ args }, i) => nodes[(i + 1) % 3]!.runPromise(Effect.flatMap(ChatStore, (s) => s.settle(settleArgs(args, 9, charges[i]!)))))
    )
    const spent = charges.reduce((a, b) => a + b, 0)
    const [w2] = await query<{ spent: number; reserved: number }>(nodes[2]!, "SELECT spent, reserved FROM budget_windows WHERE project_id = $1", project.id)
    expect(w2).toEqual({ spent, reserved: 0 })
    expect(typeof w2!.spent).toBe("number")

    const rows = await query<{ seq: number; body: string; signing_key_id: string }>(
      nodes[1]!,
      "SELECT seq, body, signing_key_id FROM receipts WHERE project_id = $1 ORDER BY seq",
      project.id
    )
    expect(rows.map((r) => r.seq)).toEqual(held.map((_, i) => i + 1))
    const receipts = rows.map((r) => JSON.parse(r.body) as Receipt)
    expect(receipts.reduce((n, r) => n + r.credits_charged, 0)).toBe(spent)
    expect(new Set(rows.map((r) => r.signing_key_id)).size).toBe(3)
    // Every instance serves every instance's public key; each receipt verifies and links to the one before.
    const keys = await Promise.all(nodes.map((rt) => rt.runPromise(Effect.flatMap(ReceiptSigner, (s) => s.publicKeys))))
    for (const k of keys) expect(k.map((x) => x.id).sort()).toEqual(keys[0]!.map((x) => x.id).sort())
    const pem = new Map(keys[0]!.map((k) => [k.id, k.public_key]))
    receipts.forEach((r, i) => {
      expect(r.prev_hash).toBe(i === 0 ? GENESIS_HASH : receipts[i - 1]!.hash)
      expect(verifyReceipt(r, pem.get(r.signing_key_id)!)).toEqual([])
    })
    const [head] = await query<{ seq: number; hash: string }>(nodes[0]!, "SELECT seq, hash FROM chain_heads WHERE project_id = $1", project.id)
    expect(head).toEqual({ seq: receipts.length, hash: receipts.at(-1)!.hash })
    // The Ledger's read (what GET /v1/usage and routing/evaluate show) agrees on every instance.
    for (const rt of nodes) {
      const w = await rt.runPromise(Effect.flatMap(Ledger, (l) => l.window(project.id, "2026-01")))
      expect(w).toEqual({ period: "2026-01", cap, spent, reserved: 0 })
    }
  })

  it("one idempotency key sent to three instances at once: exactly one claim wins, the others meet it in flight", async () => {
    const { nodes } = await cluster(3)
    const project = await newProject(nodes[0]!, 1_000)
    const claim = { key: "idem-1", fingerprint: "f".repeat(64) }
    const tries = nodes.flatMap((rt) => Array.from({ length: 5 }, () => ({ rt, args: reserveArgs(project.id, 5, { claim }) })))
    const outcomes = await Promise.all(tries.map(({ rt, args }) => reserve(rt, args)))
    expect(outcomes.filter(Either.isRight)).toHaveLength(1)
    for (const o of outcomes.filter(Either.isLeft)) expect(o.left).toMatchObject({ _tag: "ClaimLost", outcome: { _tag: "InFlight" } })
    const [w] = await query<{ reserved: number }>(nodes[0]!, "SELECT reserved FROM budget_windows WHERE project_id = $1", project.id)
    expect(w!.reserved).toBe(5)
    expect(await query(nodes[1]!, "SELECT COUNT(*) AS n FROM requests WHERE project_id = $1", project.id)).toEqual([{ n: 1 }])
  })

  it("the recovery sweep run by three instances at once voids each expired hold exactly once", async () => {
    const { nodes } = await cluster(3)
    const project = await newProject(nodes[0]!, 100_000)
    const holds = Array.from({ length: 120 }, (_, i) => reserveArgs(project.id, 3, { deadline: DEFAULT_NOW + 10 + (i % 7) }))
    for (const args of holds) expect(Either.isRight(await reserve(nodes[0]!, args))).toBe(true)
    const failure = { code: "reservation_expired", message: "expired" }
    const voided = await Promise.all(
      nodes.flatMap((rt) => [1, 2].map(() => rt.runPromise(Effect.flatMap(ChatStore, (s) => s.expire({ now: DEFAULT_NOW + 1_000, failure })))))
    )
    expect(voided.reduce((a, b) => a + b, 0)).toBe(holds.length)
    expect(await query(nodes[0]!, "SELECT spent, reserved FROM budget_windows WHERE project_id = $1", project.id)).toEqual([{ spent: 0, reserved: 0 }])
    expect(await query(nodes[1]!, "SELECT state, COUNT(*) AS n FROM reservations WHERE project_id = $1 GROUP BY state", project.id)).toEqual([
      { state: "voided", n: holds.length }
    ])
    expect(await query(nodes[2]!, "SELECT status, error_code, COUNT(*) AS n FROM requests WHERE project_id = $1 GROUP BY status, error_code", project.id)).toEqual([
      { status: "failed", error_code: "reservation_expired", n: holds.length }
    ])
    // A settlement that comes after the sweep voided its hold is refused, never a second resolution.
    const late = await nodes[1]!.runPromiseExit(Effect.flatMap(ChatStore, (s) => s.settle(settleArgs(holds[0]!, 3, 3))))
    expect(late._tag).toBe("Failure")
    expect(await query(nodes[0]!, "SELECT COUNT(*) AS n FROM receipts WHERE project_id = $1", project.id)).toEqual([{ n: 0 }])
  })

  it("dead epochs: another instance's live holds and claims are left alone; a stale one's are freed once (a marked stream charged from its progress mark), by two survivors at once", async () => {
    const schema = freshSchema()
    schemas.push(schema)
    // A long heartbeat, so no beat rewrites what the test sets: an epoch is stale after 600 s.
    const [a, b, c] = ["node-a", "node-b", "node-c"].map((id) => instance(schema.url, { instanceId: id, heartbeatMs: 60_000 }))
    await Promise.all([a!, b!, c!].map((rt) => rt.runPromise(Bootstrap)))
    const project = await newProject(a!, 100_000)
    const epochA = await a!.runPromise(Effect.map(InstanceEpoch, (i) => i.epoch))
    const deadline = Date.now() + 3_600_000
    const holds = Array.from({ length: 30 }, (_, i) => ({
      ...reserveArgs(project.id, 3, i % 2 === 0 ? { deadline, claim: { key: `dead-${i}`, fingerprint: "f" } } : { deadline }),
      epoch: epochA
    }))
    for (const args of holds) expect(Either.isRight(await reserve(a!, args))).toBe(true)
    // And one open stream whose heartbeat marked its progress (5 output tokens delivered).
    const stream = { ...reserveArgs(project.id, 3, { deadline, stream: true }), epoch: epochA }
    expect(Either.isRight(await reserve(a!, stream))).toBe(true)
    const mark = { route: "demo", rateCardVersion: "rc_2026-01", tokens: { input: 3, cached_input: 0, output: 5, reasoning: 0 }, at: Date.now() }
    await a!.runPromise(Effect.flatMap(ChatStore, (st) => st.heartbeat({ epoch: epochA, now: Date.now(), marks: [{ reservationId: stream.hold.reservationId, mark }] })))
    const resolve = (rt: Instance) => rt.runPromise(Effect.flatMap(Recovery, (r) => r.resolveDeadEpochs))
    const leftOfA = async () => ({
      holds: (await query<{ n: number }>(a!, "SELECT COUNT(*) AS n FROM reservations WHERE epoch = $1 AND state = 'held'", epochA))[0]!.n,
      claims: (await query<{ n: number }>(a!, "SELECT COUNT(*) AS n FROM idempotency WHERE epoch = $1 AND state = 'in_flight'", epochA))[0]!.n
    })
    // A lives (a fresh heartbeat, its own instance id): B's and C's recovery leave its calls alone.
    expect(await Promise.all([resolve(b!), resolve(c!)])).toEqual([{ charged: 0, voided: 0 }, { charged: 0, voided: 0 }])
    expect(await leftOfA()).toEqual({ holds: 31, claims: 15 })
    // A's heartbeat stops (as if SIGKILLed 700 s ago): B and C, at once, free each hold and claim once.
    await query(a!, "UPDATE instances SET heartbeat_at = $1 WHERE epoch = $2", Date.now() - 700_000, epochA)
    await Promise.all([resolve(b!), resolve(c!), resolve(b!)])
    expect(await leftOfA()).toEqual({ holds: 0, claims: 0 })
    // The stream is charged from its mark, once, with a receipt; everything else voided.
    const receipts = await query<{ request_id: string; credits_charged: number }>(a!, "SELECT request_id, credits_charged FROM receipts WHERE project_id = $1", project.id)
    expect(receipts.map((r) => r.request_id)).toEqual([stream.request.id])
    expect(receipts[0]!.credits_charged).toBeGreaterThan(0)
    expect(await query(a!, "SELECT spent, reserved FROM budget_windows WHERE project_id = $1", project.id)).toEqual([{ spent: receipts[0]!.credits_charged, reserved: 0 }])
    expect(await query(b!, "SELECT state, COUNT(*) AS n FROM reservations WHERE project_id = $1 GROUP BY state ORDER BY state", project.id)).toEqual([
      { state: "settled", n: 1 },
      { state: "voided", n: 30 }
    ])
    expect(await query(c!, "SELECT status, error_code, COUNT(*) AS n FROM requests WHERE project_id = $1 GROUP BY status, error_code ORDER BY status", project.id)).toEqual([
      { status: "completed", error_code: null, n: 1 },
      { status: "failed", error_code: "interrupted", n: 30 }
    ])
  })

  it("a key revoked on one instance is refused by the others at once (LISTEN/NOTIFY), not after their cache's TTL", async () => {
    // A minute of key cache: only the announcement can make the other instances see the revocation.
    const { nodes } = await cluster(3, { keyCacheTtlMs: 60_000 })
    const project = await newProject(nodes[0]!, 1_000)
    const key = await nodes[0]!.runPromise(Effect.flatMap(KeyRegistry, (k) => k.create(project.id, "development")))
    const auth = (rt: Instance) => rt.runPromise(Effect.either(Effect.flatMap(KeyRegistry, (k) => k.authenticate(`Bearer ${key.secret}`))))
    for (const rt of nodes) expect(Either.isRight(await auth(rt))).toBe(true)
    await nodes[0]!.runPromise(Effect.flatMap(KeyRegistry, (k) => k.revoke(key.id)))
    const at = Date.now()
    for (const rt of nodes.slice(1)) {
      while (Either.isRight(await auth(rt))) {
        expect(Date.now() - at).toBeLessThan(1_000)
        await new Promise((r) => setTimeout(r, 5))
      }
    }
    expect(Date.now() - at).toBeLessThan(1_000)
  })

  it("a settlement that deadlocks with another connection is rolled back, retried after a backoff and commits once; /metrics counts it", async () => {
    const { schema, nodes } = await cluster(1)
    const node = nodes[0]!
    const project = await newProject(node, 1_000)
    const args = reserveArgs(project.id, 100)
    expect(Either.isRight(await reserve(node, args))).toBe(true)
    // Another connection (an operator's session, say) holds the window row the settlement posts to.
    // Its deadlock_timeout is long, so the settlement's backend (1 s, the default) is the one that
    // finds the cycle and is aborted with 40P01.
    const side = new pg.Client({ connectionString: schema.url })
    const monitor = new pg.Client({ connectionString: schema.url })
    await side.connect()
    await monitor.connect()
    try {
      await side.query("SET deadlock_timeout = '60s'")
      const sidePid = (await side.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid
      await side.query("BEGIN")
      await side.query("UPDATE budget_windows SET reserved = reserved WHERE project_id = $1", [project.id])
      const before = pgRetries["40P01"]
      const settling = node.runPromise(Effect.flatMap(ChatStore, (s) => s.settle(settleArgs(args, 100, 40))))
      // The settlement has resolved its hold (its reservation row is locked) and waits for the window row.
      while (Number((await monitor.query("SELECT COUNT(*) AS n FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", [sidePid])).rows[0].n) === 0) {
        await new Promise((r) => setTimeout(r, 10))
      }
      // Now the side connection wants the reservation row: a cycle. PostgreSQL aborts the settlement;
      // the side connection gets the row, then lets everything go.
      await side.query("UPDATE reservations SET deadline = deadline WHERE id = $1", [args.hold.reservationId])
      await side.query("ROLLBACK")
      await settling
      expect(pgRetries["40P01"]).toBe(before + 1)
      const metrics = await node.runPromise(Effect.map(Metrics, (m) => m.render()))
      expect(metrics).toContain(`tollgate_store_retries_total{reason="deadlock"} ${before + 1}`)
    } finally {
      await side.end()
      await monitor.end()
    }
    // The retried transaction committed once: one charge, one receipt, the hold settled.
    expect(await query(node, "SELECT spent, reserved FROM budget_windows WHERE project_id = $1", project.id)).toEqual([{ spent: 40, reserved: 0 }])
    expect(await query(node, "SELECT credits_charged FROM receipts WHERE project_id = $1", project.id)).toEqual([{ credits_charged: 40 }])
    expect(await query(node, "SELECT state, charge FROM reservations WHERE id = $1", args.hold.reservationId)).toEqual([{ state: "settled", charge: 40 }])
  })

  it("money and times are BIGINT and come back as exact numbers: a cap above 2^31 Credits, epoch milliseconds", async () => {
    const { nodes } = await cluster(1)
    const cap = 9_000_000_000_000
    const project = await newProject(nodes[0]!, cap)
    const args = reserveArgs(project.id, 5_000_000_000)
    expect(Either.isRight(await reserve(nodes[0]!, args))).toBe(true)
    const [row] = await query<{ amount: unknown; deadline: unknown; created_at: unknown }>(
      nodes[0]!,
      "SELECT amount, deadline, created_at FROM reservations WHERE id = $1",
      args.hold.reservationId
    )
    expect(row).toEqual({ amount: 5_000_000_000, deadline: args.hold.deadline, created_at: DEFAULT_NOW })
    const w = await nodes[0]!.runPromise(Effect.flatMap(Ledger, (l) => l.window(project.id, "2026-01")))
    expect(w).toEqual({ period: "2026-01", cap, spent: 0, reserved: 5_000_000_000 })
  })
})
