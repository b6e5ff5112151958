/**
 * Three gateway processes (the bundle `npm start` runs) on one PostgreSQL database and one Redis,
 * started together, under concurrent traffic spread over the three: a project at its budget edge, a
 * project at its rate edge, one idempotency key retried on every instance, a key revoked mid-burst,
 * and one instance killed with SIGKILL mid-burst and started again at once (its holds and claims
 * freed by the restart's resolution of its dead epoch, well before their deadline). Then, on the database: Σ receipts
 * = spent ≤ cap per project, one upstream call and one charge for the idempotency key, admitted ≤
 * burst + rate·t across the instances, the revoked key refused everywhere within 1 s, every hold
 * resolved, one unbroken receipt chain per project. Runs when PostgreSQL and Redis answer (always
 * under CI=true).
 */
import { spawnSync } from "node:child_process"
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { GENESIS_HASH, type Receipt, verifyReceipt } from "../../spec/receipt.ts"
import { mockGatewayFile } from "../support/gateway.ts"
import { type Instance, startInstance } from "../support/instances.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { freshSchema, onEngines, pgQuerySync, TEST_REDIS_URL, type TestSchema } from "../support/pg.ts"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..")
const ADMIN = "multi-instance-admin-token"

type Node = Instance

describe.runIf(onEngines("test/start/multiInstance.test.ts", { pg: true, redis: true }))("three instances on one PostgreSQL and one Redis", () => {
  mkdirSync(join(root, ".tollgate"), { recursive: true })
  const dir = mkdtempSync(join(root, ".tollgate", "multi-"))
  let schema: TestSchema
  let mock: MockUpstream
  const nodes: Array<Node> = []
  let env: Record<string, string>

  const start = (i: number): Promise<Node> => startInstance(dir, i, env)


  const admin = async (node: Node, method: string, path: string, body?: unknown) => {
    const res = await fetch(`${node.origin}${path}`, {
      method,
      headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) })
    })
    return { status: res.status, body: (await res.json()) as any }
  }
  const project = async (budget: number, rpm = 6000, burst = 1000) => {
    const p = await admin(nodes[0]!, "POST", "/admin/v1/projects", { name: "p", budget_credits: budget, rate_limit: { requests_per_minute: rpm, burst } })
    expect(p.status).toBe(201)
    const k = await admin(nodes[1]!, "POST", `/admin/v1/projects/${p.body.id}/keys`, { environment: "development" })
    expect(k.status).toBe(201)
    return { id: p.body.id as string, key: k.body.secret as string, keyId: k.body.id as string }
  }
  const chat = (node: Node, key: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
    fetch(`${node.origin}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
      body: JSON.stringify({ model: "auto", max_tokens: 20, messages: [{ role: "user", content: "hello there" }], ...extra })
    }).then(async (r) => ({ status: r.status, body: await r.text() }))
  const q = <T = Record<string, unknown>>(sql: string, ...params: Array<unknown>) => pgQuerySync<T>(schema.url, sql, params)
  const ledgerOf = (projectId: string) =>
    q<{ cap: number; spent: number; reserved: number; receipts: number; receipt_sum: number }>(
      `SELECT p.budget_credits AS cap, COALESCE(SUM(w.spent), 0) AS spent, COALESCE(SUM(w.reserved), 0) AS reserved,
         (SELECT COUNT(*) FROM receipts r WHERE r.project_id = p.id) AS receipts,
         (SELECT COALESCE(SUM(credits_charged), 0) FROM receipts r WHERE r.project_id = p.id) AS receipt_sum
       FROM projects p LEFT JOIN budget_windows w ON w.project_id = p.id WHERE p.id = ? GROUP BY p.id`,
      projectId
    )[0]!

  beforeAll(async () => {
    const build = spawnSync(process.execPath, [join(root, "scripts/build.mjs"), join(root, "src/main.ts"), join(dir, "dist")], { encoding: "utf8" })
    expect(build.status, build.stderr).toBe(0)
    schema = freshSchema()
    mock = await startMockUpstream({ behavior: { delayMs: 80 } })
    // 1 Credit per token, so a call's worst case is ≈ 30 Credits and budgets bite at small numbers.
    const config = join(dir, "config.json")
    writeFileSync(config, JSON.stringify(mockGatewayFile(mock.url, undefined, { "gpt-test": { input: 1_000_000, output: 1_000_000 } })))
    const { TOLLGATE_CONFIG: _c, TOLLGATE_ADMIN_TOKEN: _a, ...rest } = process.env as Record<string, string>
    env = {
      ...rest,
      PORT: "0",
      HOST: "127.0.0.1",
      DATABASE_URL: schema.url,
      REDIS_URL: TEST_REDIS_URL,
      TOLLGATE_CONFIG: config,
      TOLLGATE_ADMIN_TOKEN: ADMIN,
      TOLLGATE_PG_POOL_SIZE: "4",
      TOLLGATE_ACCESS_LOG: "false",
      TOLLGATE_UPSTREAM_TIMEOUT_MS: "2000",
      TOLLGATE_UPSTREAM_DEADLINE_MS: "3000",
      TOLLGATE_RESERVATION_TTL_MS: "6000"
    }
    nodes.push(...(await Promise.all([0, 1, 2].map(start))))
  }, 120_000)

  afterAll(async () => {
    for (const n of nodes) if (n.child.exitCode === null && n.child.signalCode === null) n.child.kill("SIGTERM")
    await Promise.all(nodes.map((n) => (n.child.exitCode === null && n.child.signalCode === null ? new Promise((r) => n.child.once("exit", r)) : undefined)))
    await mock?.close()
    schema?.drop()
    rmSync(dir, { recursive: true, force: true })
  })

  it("started together: one of them created the default project and printed its key", () => {
    expect(nodes.filter((n) => n.out.includes("development key:"))).toHaveLength(1)
    expect(q("SELECT COUNT(*) AS n FROM projects")).toEqual([{ n: 1 }])
  })

  it("a project at its budget edge, called on all three at once: never overspent, Σ receipts = spent", async () => {
    const p = await project(400)
    const before = mock.calls
    const results = await Promise.all(Array.from({ length: 36 }, (_, i) => chat(nodes[i % 3]!, p.key)))
    // A 402 is decided before the upstream: only the admitted calls reach it.
    const upstreamCalls = mock.calls - before
    const ok = results.filter((r) => r.status === 200).length
    const refused = results.filter((r) => r.status === 402).length
    expect(ok + refused).toBe(results.length)
    expect(ok).toBeGreaterThan(0)
    expect(refused).toBeGreaterThan(0)
    const l = ledgerOf(p.id)
    expect(l.spent).toBeLessThanOrEqual(l.cap)
    expect(l.receipt_sum).toBe(l.spent)
    expect(l.receipts).toBe(ok)
    expect(l.reserved).toBe(0)
    expect(upstreamCalls).toBe(ok)
    console.log(`budget edge: ${results.length} calls, ${ok} × 200, ${refused} × 402, ${upstreamCalls} upstream calls, spent ${l.spent} of ${l.cap}`)
  })

  it("a project at its rate edge, called on all three at once: admitted ≤ burst + rate·t across the instances", async () => {
    const p = await project(1_000_000, 60, 5)
    const before = mock.calls
    const t0 = Date.now()
    const results = await Promise.all(Array.from({ length: 30 }, (_, i) => chat(nodes[i % 3]!, p.key)))
    const seconds = (Date.now() - t0) / 1000
    const upstreamCalls = mock.calls - before
    const ok = results.filter((r) => r.status === 200).length
    const limited = results.filter((r) => r.status === 429).length
    expect(ok + limited).toBe(results.length)
    expect(ok).toBeGreaterThanOrEqual(5)
    expect(ok).toBeLessThanOrEqual(5 + Math.floor(seconds) + 1)
    expect(upstreamCalls).toBe(ok)
    console.log(`rate edge: ${results.length} calls in ${seconds.toFixed(2)} s, ${ok} × 200, ${limited} × 429 (burst 5, 1/s), ${upstreamCalls} upstream calls`)
  })

  it("one idempotency key retried on every instance at once: one upstream call, one charge, the same body everywhere", async () => {
    const p = await project(1_000_000)
    const before = mock.calls
    const results = await Promise.all(Array.from({ length: 9 }, (_, i) => chat(nodes[i % 3]!, p.key, {}, { "idempotency-key": "multi-instance-1" })))
    expect(results.map((r) => r.status)).toEqual(Array(9).fill(200))
    expect(new Set(results.map((r) => r.body)).size).toBe(1)
    expect(mock.calls - before).toBe(1)
    expect(ledgerOf(p.id).receipts).toBe(1)
    console.log(`idempotency: 9 calls on 3 instances, ${mock.calls - before} upstream call, 1 receipt`)
  })

  it("a call in flight on one instance is waited for by the others and replayed: one upstream call, one charge, the original's bytes", async () => {
    const p = await project(1_000_000)
    const before = mock.calls
    mock.pushBehavior({ delayMs: 1_500 })
    const original = chat(nodes[0]!, p.key, {}, { "idempotency-key": "in-flight-1" })
    // The duplicates are sent only once the original's claim is in flight in the shared store.
    for (;;) {
      const [row] = q<{ state: string }>("SELECT state FROM idempotency WHERE project_id = ? AND key = 'in-flight-1'", p.id)
      if (row?.state === "in_flight") break
      if (row?.state === "finished") throw new Error("the original finished before the duplicates were sent; the upstream delay is too short")
      await new Promise((r) => setTimeout(r, 10))
    }
    const duplicates = await Promise.all([1, 2].map((i) => chat(nodes[i]!, p.key, {}, { "idempotency-key": "in-flight-1" })))
    const first = await original
    expect([first, ...duplicates].map((r) => r.status)).toEqual([200, 200, 200])
    for (const d of duplicates) expect(d.body).toBe(first.body)
    expect(mock.calls - before).toBe(1)
    expect(ledgerOf(p.id).receipts).toBe(1)
  })

  it("a key revoked on one instance is refused by every instance within 1 s", async () => {
    const p = await project(1_000_000)
    // Warm every instance's key cache.
    for (const n of nodes) expect((await chat(n, p.key)).status).toBe(200)
    const revoked = await admin(nodes[0]!, "POST", `/admin/v1/keys/${p.keyId}/revoke`)
    expect(revoked.status).toBe(200)
    const at = Date.now()
    let lastAccepted = at
    const burst = async (n: Node) => {
      for (;;) {
        const r = await chat(n, p.key)
        if (r.status === 401) return
        expect(r.status).toBe(200)
        lastAccepted = Math.max(lastAccepted, Date.now())
      }
    }
    await Promise.all([nodes[1]!, nodes[2]!].map(burst))
    const delay = lastAccepted - at
    expect(delay).toBeLessThanOrEqual(1_000 + 150)
    console.log(`revocation: last acceptance ${delay} ms after the revoke answered`)
  })

  it("an instance killed with SIGKILL mid-burst and started again: its holds and claims freed within seconds of the restart, every hold resolved, Σ receipts = spent", async () => {
    const p = await project(1_000_000)
    const victim = nodes[2]!
    const deadEpoch = q<{ epoch: number }>("SELECT MAX(epoch) AS epoch FROM instances WHERE instance_id = 'node-2'")[0]!.epoch
    // A slow upstream, so the victim is killed while its calls hold budget; each call with its own
    // idempotency key, so its cut calls leave claims as well as holds.
    mock.setBehavior({ delayMs: 1_500 })
    const calls = Array.from({ length: 12 }, (_, i) =>
      chat(nodes[i % 3]!, p.key, {}, { "idempotency-key": `kill-${i}` }).catch(() => ({ status: 0, body: "" }))
    )
    const heldByVictim = () => q<{ n: number }>("SELECT COUNT(*) AS n FROM reservations WHERE epoch = ? AND state = 'held'", deadEpoch)[0]!.n
    const pollUntil = Date.now() + 1_200
    while (heldByVictim() < 4 && Date.now() < pollUntil) await new Promise((r) => setTimeout(r, 20))
    victim.child.kill("SIGKILL")
    await new Promise((r) => (victim.child.exitCode !== null || victim.child.signalCode !== null ? r(undefined) : victim.child.once("exit", r)))
    const results = await Promise.all(calls)
    mock.setBehavior({ delayMs: 80 })
    const left = () =>
      q<{ holds: number; claims: number }>(
        `SELECT (SELECT COUNT(*) FROM reservations WHERE epoch = ? AND state = 'held') AS holds,
                (SELECT COUNT(*) FROM idempotency WHERE epoch = ? AND state = 'in_flight') AS claims`,
        deadEpoch,
        deadEpoch
      )[0]!
    const before = left()
    // The check below is about something: the victim died holding budget and keys.
    expect(before.holds).toBeGreaterThan(0)
    expect(before.claims).toBeGreaterThan(0)
    // Restarted at once: the holds' deadline (TTL 6 s) is not what frees them, the restart's
    // resolution of its own earlier epoch (same TOLLGATE_INSTANCE_ID) is, before it listens.
    const restartAt = Date.now()
    nodes[2] = await start(2)
    while ((left().holds > 0 || left().claims > 0) && Date.now() - restartAt < 10_000) await new Promise((r) => setTimeout(r, 100))
    const freedMs = Date.now() - restartAt
    expect(left()).toEqual({ holds: 0, claims: 0 })
    // Within seconds of the restart (the start itself, a bundled process on a loaded 2-core box, included).
    expect(freedMs).toBeLessThan(5_000)
    // The cut calls, retried with their keys on the restarted instance: the keys are free (or answer
    // with the result recorded for them), never a 409 for a claim nobody holds.
    const retried = await Promise.all(
      results.map((r, i) => (r.status === 0 ? chat(nodes[2]!, p.key, {}, { "idempotency-key": `kill-${i}` }) : Promise.resolve(undefined)))
    )
    for (const r of retried) if (r !== undefined) expect(r.status).toBe(200)
    const l = ledgerOf(p.id)
    expect(l.reserved).toBe(0)
    expect(l.receipt_sum).toBe(l.spent)
    expect(q("SELECT COUNT(*) AS n FROM reservations WHERE project_id = ? AND state = 'held'", p.id)).toEqual([{ n: 0 }])
    expect(l.receipts).toBeGreaterThanOrEqual(results.filter((r) => r.status === 200).length)
    console.log(
      `SIGKILL: ${results.length} calls, ${results.filter((r) => r.status === 200).length} × 200, ${results.filter((r) => r.status === 0).length} cut; ` +
        `the dead epoch left ${before.holds} hold(s) and ${before.claims} claim(s), freed ${freedMs} ms after the restart began; spent ${l.spent} = Σ ${l.receipts} receipts`
    )
  }, 40_000)

  it("every project's receipts form one chain and verify with the public keys any instance serves", async () => {
    const keys = (await (await fetch(`${nodes[1]!.origin}/v1/receipts/keys`)).json()) as { data?: Array<{ id: string; public_key: string }> } | Array<{ id: string; public_key: string }>
    const list = Array.isArray(keys) ? keys : (keys.data ?? [])
    const pem = new Map(list.map((k) => [k.id, k.public_key]))
    expect(pem.size).toBeGreaterThanOrEqual(3)
    for (const { project_id } of q<{ project_id: string }>("SELECT DISTINCT project_id FROM receipts")) {
      const receipts = q<{ body: string }>("SELECT body FROM receipts WHERE project_id = ? ORDER BY seq", project_id).map((r) => JSON.parse(r.body) as Receipt)
      receipts.forEach((r, i) => {
        expect(r.seq).toBe(i + 1)
        expect(r.prev_hash).toBe(i === 0 ? GENESIS_HASH : receipts[i - 1]!.hash)
        expect(verifyReceipt(r, pem.get(r.signing_key_id)!)).toEqual([])
      })
    }
  })

  it("last: `tollgate audit` on the PostgreSQL store all three instances wrote finds it clean (one snapshot, the spec's checkers)", () => {
    const run = spawnSync(process.execPath, [join(root, "bin/tollgate.mjs"), "audit", "--database-url", schema.url, "--json", "--jobs", "2"], {
      cwd: root,
      encoding: "utf8",
      timeout: 60_000
    })
    const report = JSON.parse(run.stdout) as { engine: string; clean: boolean; findings_total: number; stats: { receipts: number; chains: number } }
    const receipts = Number(q<{ n: number }>("SELECT count(*) AS n FROM receipts")[0]!.n)
    expect(report.engine).toBe("postgres")
    expect(report.stats.receipts).toBe(receipts)
    expect(receipts).toBeGreaterThan(0)
    expect(report).toMatchObject({ clean: true, findings_total: 0 })
    expect(run.status).toBe(0)
    console.log(`audit on PostgreSQL: ${receipts} receipts in ${report.stats.chains} chains, clean`)
  }, 60_000)
})
