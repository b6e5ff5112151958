/**
 * Issue 43, the export: `tollgate export` (a child process on the admin API) follows the cursors and
 * writes the pages one after another, which read back (spec/export.ts) as the one full read; and a
 * large project — 100,000 receipts written straight into the store by this file's fixture — streams
 * in flat memory: the process's heap grows by a small fraction of the export's size while it is read,
 * where holding the page would take all of it. Prints the rate (receipts/s) and the heap figures,
 * and what the background round costs a receipt to put the log over them (CPU µs a receipt).
 */
import Database from "better-sqlite3"
import { execFile } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import { Effect, Layer, Option } from "effect"
import { dirname } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Pricing } from "../../src/services/Pricing.ts"
import { ReceiptLog } from "../../src/services/ReceiptLog.ts"
import { ReceiptSigner } from "../../src/services/ReceiptSigner.ts"
import { StoreDatabaseLive } from "../../src/store/Database.ts"
import { testRuntime } from "../support/runtime.ts"
import { readExport } from "../../spec/export.ts"
import { receiptLeafHash, treeHead, verifyConsistency } from "../../spec/merkle.ts"
import type { Receipt } from "../../spec/receipt.ts"
import { clientFor, newProject, raw } from "../e2e/helpers.ts"
import { ADMIN_TOKEN, mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"

// The gateway's own background round off: the last test measures the log's work itself.
process.env.TOLLGATE_CHECKPOINT_INTERVAL_MS = "0"
const N = 100_000
/** The large project, for the log's cost below. */
let big: string | undefined
let upstream: MockUpstream
let gw: TestGateway
const dir = mkdtempSync(join(tmpdir(), "tollgate-export-"))
beforeAll(async () => {
  upstream = await startMockUpstream()
  gw = await startGateway(mockGatewayFile(upstream.url))
})
afterAll(async () => {
  await gw?.close()
  await upstream?.close()
  rmSync(dir, { recursive: true, force: true })
})

const gcs = (chunks: number): number => Math.floor(chunks / 64)

const cli = (args: ReadonlyArray<string>) =>
  new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(process.execPath, ["bin/tollgate.mjs", ...args], { cwd: process.cwd(), env: { ...process.env, TOLLGATE_URL: gw.origin, TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN }, maxBuffer: 64 << 20 }, (err, stdout, stderr) =>
      resolve({ code: err === null ? 0 : typeof err.code === "number" ? err.code : 1, stdout, stderr })
    )
  })

const receiptsOf = (text: string): Array<Receipt> => {
  const records = readExport(text)
  expect(records.filter((r) => r.kind === "malformed")).toEqual([])
  return records.flatMap((r) => (r.kind === "receipt" ? [r.receipt] : []))
}

describe("tollgate export", () => {
  it("follows the cursors: the pages written one after another are the one full read", async () => {
    const { projectId, key } = await newProject(gw, { name: "cli-export" })
    const client = clientFor(gw, key)
    for (let i = 0; i < 5; i++) await client.chat.completions.create({ model: "gpt-test", messages: [{ role: "user", content: `export ${i}` }], max_tokens: 4 })
    const full = receiptsOf(await (await raw(gw, "/v1/receipts", { key })).text())
    expect(full).toHaveLength(5)
    const out = join(dir, "small.jsonl")
    const r = await cli(["export", projectId, "--out", out, "--limit", "2"])
    expect(r.stderr).toMatch(/3 page\(s\) written/)
    expect(r.code).toBe(0)
    const text = readFileSync(out, "utf8")
    expect(text.split("\n").filter((l) => l.startsWith('{"object":"receipt_export"'))).toHaveLength(3)
    expect(receiptsOf(text)).toEqual(full)
    // to stdout, by period
    const byPeriod = await cli(["export", projectId, "--period", full[0]!.period])
    expect(byPeriod.code).toBe(0)
    expect(receiptsOf(byPeriod.stdout)).toEqual(full)
    // an unknown project: the admin API's 404, exit 1
    const unknown = await cli(["export", "prj_nope"])
    expect(unknown.code).toBe(1)
    expect(unknown.stderr).toMatch(/404/)
  }, 60_000)

  it("a project of 100,000 receipts streams in flat memory", async () => {
    if (gw.engine !== "sqlite") return
    const { projectId, key } = await newProject(gw, { name: "big" })
    big = projectId
    // the fixture: N receipts of the served shape, chained by seq, written straight into the store
    const db = new Database(gw.dbPath)
    const insert = db.prepare(`INSERT INTO receipts (id, request_id, project_id, environment, period, seq, credits_charged, rate_card_version, body, prev_hash, hash, signature, signing_key_id, created_at)
      VALUES (?, ?, ?, 'development', '2026-10', ?, 3, 'rc_2020-01', ?, ?, ?, ?, 'rk_0123456789abcdef', 0)`)
    const hex = (n: number) => n.toString(16).padStart(64, "0")
    let bytes = 0
    // in transactions of 5,000, the event loop let go between them: the gateway runs in this process
    const write = db.transaction((from: number, to: number) => {
      for (let seq = from; seq <= to; seq++) {
        const body = JSON.stringify({
          created_at: "2026-10-02T03:04:05.678Z", credits_charged: 3, credits_reserved: 512, environment: "development", hash: hex(seq), model: "gpt-test",
          object: "receipt", organization: "org_synthetic", period: "2026-10", prev_hash: hex(seq - 1), project_id: projectId, rate_card_version: "rc_2020-01",
          receipt_id: `rcpt_${String(seq).padStart(20, "0")}`, request_id: `req_${String(seq).padStart(20, "0")}`, route: "gpt-test", seq,
          signature: "s".repeat(86), signing_key_id: "rk_0123456789abcdef", status: "completed", tokens: { cached_input: 0, input: 12, output: 7, reasoning: 0 },
          usage_source: "reported", verification: { checks: ["route", "schema", "budget"], failed_checks: [], state: "verified" }
        })
        bytes += body.length + 1
        insert.run(`rcpt_${seq}`, `req_${projectId}_${seq}`, projectId, seq, body, hex(seq - 1), hex(seq), "s".repeat(86))
      }
    })
    for (let from = 1; from <= N; from += 5000) {
      write(from, Math.min(N, from + 4999))
      await new Promise((r) => setImmediate(r))
    }
    db.prepare("INSERT INTO chain_heads (project_id, seq, hash) VALUES (?, ?, ?)").run(projectId, N, hex(N))
    db.close()

    // one page of all of it, read as it streams; the live heap (after a full collection) sampled every 64 chunks
    setFlagsFromString("--expose-gc")
    const gc = runInNewContext("gc") as () => void
    gc()
    const before = process.memoryUsage().heapUsed
    let peak = before
    let chunks = 0
    let count = 0
    let tail = ""
    const started = performance.now()
    const res = await raw(gw, `/v1/receipts?period=2026-10&limit=${N}`, { key })
    expect(res.status).toBe(200)
    const decoder = new TextDecoder()
    for await (const chunk of res.body!) {
      const text = tail + decoder.decode(chunk, { stream: true })
      const lines = text.split("\n")
      tail = lines.pop()!
      count += lines.length
      if (++chunks % 64 === 0) {
        gc()
        peak = Math.max(peak, process.memoryUsage().heapUsed)
      }
    }
    const seconds = (performance.now() - started) / 1000
    expect(count).toBe(N + 1) // the header and every receipt
    const growth = peak - before
    console.log(
      `export of ${N} receipts (${(bytes / 1e6).toFixed(1)} MB) in ${chunks} chunks: ${(N / seconds).toFixed(0)} receipts/s (${gcs(chunks)} full collections included), ${seconds.toFixed(2)} s; live heap before ${(before / 1e6).toFixed(1)} MB, peak live growth ${(growth / 1e6).toFixed(1)} MB`
    )
    // holding the page would take at least its bytes; streaming keeps a few chunks at a time
    expect(growth).toBeLessThan(bytes / 10)

    // the operator's CLI, a process of its own, in pages of 10,000 to a file: the rate without this file's collections
    const out = join(dir, "big.jsonl")
    const t0 = performance.now()
    const r = await cli(["export", projectId, "--out", out])
    const cliSeconds = (performance.now() - t0) / 1000
    expect(r.code).toBe(0)
    expect(r.stderr).toMatch(/10 page\(s\) written/)
    console.log(`tollgate export of ${N} receipts to a file: ${cliSeconds.toFixed(2)} s, ${(N / cliSeconds).toFixed(0)} receipts/s (process start included)`)
  }, 180_000)

  it("the background round's cost: the log of 100,000 receipts extended, checkpointed and proved, CPU per receipt", async () => {
    if (gw.engine !== "sqlite" || big === undefined) return
    expect(gw.query("SELECT tree_size FROM receipt_log WHERE project_id = ?", big)).toEqual([])
    const runtime = testRuntime(ReceiptLog.Default.pipe(Layer.provideMerge(Layer.merge(ReceiptSigner.Default, Pricing.Default)), Layer.provideMerge(StoreDatabaseLive)), {
      databaseUrl: gw.databaseUrl,
      receiptKeyFile: Option.some(join(dirname(gw.dbPath), "receipt-signing-key.pem"))
    })
    try {
      const cpu = process.cpuUsage()
      const started = performance.now()
      const size = await runtime.runPromise(Effect.flatMap(ReceiptLog, (log) => log.extend(big!, N)))
      const extendMs = performance.now() - started
      const used = process.cpuUsage(cpu)
      expect(size).toBe(N)
      const nodes = gw.query<{ n: number }>("SELECT COUNT(*) AS n FROM receipt_log_nodes WHERE project_id = ?", big)[0]!.n
      expect(nodes).toBe(Array.from({ length: 17 }, (_, l) => l + 4).reduce((n, l) => n + Math.floor(N / 2 ** l), 0))
      const t0 = performance.now()
      const cp = await runtime.runPromise(Effect.flatMap(ReceiptLog, (log) => log.checkpointOf(big!, N)))
      const t1 = performance.now()
      const proof = await runtime.runPromise(Effect.flatMap(ReceiptLog, (log) => log.consistency(big!, "77777", String(N))))
      const t2 = performance.now()
      expect(cp.tree_size).toBe(N)
      expect(proof.hashes.length).toBeGreaterThan(0)
      // the root signed from the stored subtrees is the rulebook's tree head of all 100,000 receipts
      const leaves = gw.query<{ hash: string }>("SELECT hash FROM receipts WHERE project_id = ? ORDER BY seq", big).map((r) => receiptLeafHash(r.hash))
      expect(cp.root).toBe(Buffer.from(treeHead(leaves)).toString("base64"))
      // and a served consistency proof links it to the tree of 77,777
      expect(verifyConsistency(77_777, N, proof.hashes.map((h) => new Uint8Array(Buffer.from(h, "base64"))), treeHead(leaves, 77_777), treeHead(leaves))).toBe(true)
      console.log(
        `receipt log of ${N} receipts: extended in ${extendMs.toFixed(0)} ms wall, ${((used.user + used.system) / N).toFixed(1)} µs CPU a receipt, ${nodes} node rows; ` +
          `checkpoint signed in ${(t1 - t0).toFixed(1)} ms, a consistency proof in ${(t2 - t1).toFixed(1)} ms`
      )
    } finally {
      await runtime.dispose()
    }
  }, 180_000)
})
