/**
 * `npx tsx bench/exportServer.ts [--receipts 1000000] [--limit 100000] [--no-verify]`
 *
 * Issue 43: the gateway's export (GET /v1/receipts?period=) streams a large project in flat memory.
 * Starts the bundled gateway (bench/targets/tollgate.ts: SQLite file, its `npm start` flags), seeds its
 * own default project with that many receipts sealed by its own receipt key (the PEM beside its
 * database; test/verify/exportFixture.ts's chain, the gateway's sealing code, written by SQL in
 * transactions of 10,000 while the gateway idles), then reads every page of the period's export
 * (`limit` a page, following x-next-cursor) as a client would, writing it to a file. Measures the
 * gateway's RSS (/proc, every 200 ms) and its live heap after a full collection (a --import hook
 * answering SIGUSR1) before and after, and the rows/s; then `tollgate verify` on what was served
 * (signatures under the key the export names, the chain, the charges with the fixture's rate card)
 * shows the rows were the real thing. Printed, never asserted.
 */
import Database from "better-sqlite3"
import { execFile } from "node:child_process"
import { createPublicKey, createPrivateKey } from "node:crypto"
import { createWriteStream, readFileSync, rmSync, writeFileSync } from "node:fs"
import { once } from "node:events"
import { loadavg, tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { receiptKeyIdOfPem } from "../spec/ed25519.ts"
import { chainBodies, PERIOD, RATE_CARD, type SigningKey } from "../test/verify/exportFixture.ts"
import { flag, numArg } from "./lib/args.ts"
import { bundleTarget, startFlags } from "./lib/bundle.ts"
import { startChild } from "./lib/procs.ts"

const here = import.meta.dirname
const root = resolve(here, "..")
const n = numArg("--receipts", 1_000_000)
const limit = numArg("--limit", 100_000)
const heapFile = join(tmpdir(), `tollgate-export-heap-${process.pid}.txt`)
const hook = join(tmpdir(), `tollgate-export-hook-${process.pid}.mjs`)
writeFileSync(
  hook,
  `import { writeFileSync } from "node:fs"
process.on("SIGUSR1", () => { globalThis.gc?.(); globalThis.gc?.(); const m = process.memoryUsage(); writeFileSync(${JSON.stringify(heapFile)}, JSON.stringify({ heapUsed: m.heapUsed, rss: m.rss, external: m.external, arrayBuffers: m.arrayBuffers })) })\n`
)
const entry = bundleTarget(root, "targets/tollgate.ts", "export-server")
const gw = await startChild<{ port: number; key: string; dbPath: string }>("tollgate", process.execPath, [...startFlags(root), "--expose-gc", "--import", hook, entry, "--upstream", "http://127.0.0.1:9"], {
  cwd: root,
  timeoutMs: 60_000,
  env: { TOLLGATE_CHECKPOINT_INTERVAL_MS: "0" }
})
const origin = `http://127.0.0.1:${gw.ready.port}`
const auth = { authorization: `Bearer ${gw.ready.key}` }
const statusMb = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+)`, "m").exec(readFileSync(`/proc/${gw.pid}/status`, "utf8"))?.[1] ?? NaN) / 1024
const heap = async (): Promise<{ heapUsed: number; rss: number }> => {
  rmSync(heapFile, { force: true })
  process.kill(gw.pid, "SIGUSR1")
  for (let i = 0; i < 200; i++) {
    try {
      return JSON.parse(readFileSync(heapFile, "utf8")) as { heapUsed: number; rss: number }
    } catch {
      await new Promise((r) => setTimeout(r, 25))
    }
  }
  throw new Error("the gateway did not answer SIGUSR1")
}
const mb = (b: number) => (b / 1e6).toFixed(1)
const out = join(tmpdir(), `tollgate-export-served-${process.pid}.jsonl`)
try {
  const project = ((await (await fetch(`${origin}/v1/usage`, { headers: auth })).json()) as { project_id: string }).project_id
  // The gateway's own receipt key, from the PEM beside its database.
  const pem = readFileSync(join(dirname(gw.ready.dbPath), "receipt-signing-key.pem"), "utf8")
  const privateKey = createPrivateKey(pem)
  const publicPem = createPublicKey(privateKey).export({ type: "spki", format: "pem" }) as string
  const key: SigningKey = { privateKey, entry: { id: receiptKeyIdOfPem(publicPem)!, algorithm: "Ed25519", public_key: publicPem, created_at: "2026-11-01T00:00:00.000Z", retired_at: null } }

  // 1. The seed, by SQL, in transactions of 10,000.
  const t0 = performance.now()
  const db = new Database(gw.ready.dbPath)
  db.pragma("busy_timeout = 10000")
  const insert = db.prepare(`INSERT INTO receipts (id, request_id, project_id, environment, period, seq, credits_charged, rate_card_version, body, prev_hash, hash, signature, signing_key_id, created_at,
      route, input_tokens, cached_input_tokens, output_tokens, reasoning_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
  let rows: Array<{ body: string; hash: string }> = []
  let seq = 0
  let bytes = 0
  let lastHash = ""
  const write = db.transaction((batch: Array<{ body: string; hash: string }>) => {
    for (const { body } of batch) {
      const r = JSON.parse(body) as Record<string, any>
      insert.run(r.receipt_id, r.request_id, project, r.environment, r.period, r.seq, r.credits_charged, r.rate_card_version, body, r.prev_hash, r.hash, r.signature, r.signing_key_id,
        Date.parse(r.created_at), r.route, r.tokens.input, r.tokens.cached_input, r.tokens.output, r.tokens.reasoning)
    }
  })
  for (const c of chainBodies({ key, count: n, project })) {
    rows.push({ body: c.body, hash: c.hash })
    bytes += c.body.length + 1
    lastHash = c.hash
    if (rows.length === 10_000) {
      write(rows)
      seq += rows.length
      rows = []
    }
  }
  write(rows)
  seq += rows.length
  db.prepare("INSERT INTO chain_heads (project_id, seq, hash) VALUES (?, ?, ?) ON CONFLICT (project_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash").run(project, seq, lastHash)
  db.close()
  process.stdout.write(`seeded ${seq} receipts of ${project} (${mb(bytes)} MB of bodies) in ${((performance.now() - t0) / 1000).toFixed(1)} s; load average ${loadavg().map((x) => x.toFixed(1)).join(" ")}\n`)

  // 2. Every page of the period's export, as a client reads it, to a file.
  const before = await heap()
  const rssBefore = statusMb("VmRSS")
  const rss: Array<number> = []
  const sampler = setInterval(() => rss.push(statusMb("VmRSS")), 200)
  const file = createWriteStream(out)
  const started = performance.now()
  let pages = 0
  let served = 0
  let cursor: string | null = null
  do {
    const q = new URLSearchParams({ period: PERIOD, limit: String(limit), ...(cursor === null ? {} : { cursor }) })
    const res: Response = await fetch(`${origin}/v1/receipts?${q}`, { headers: auth })
    if (res.status !== 200) throw new Error(`page ${pages + 1}: ${res.status} ${await res.text()}`)
    for await (const chunk of res.body!) {
      served += (chunk as Uint8Array).byteLength
      if (!file.write(chunk)) await once(file, "drain")
    }
    cursor = res.headers.get("x-next-cursor")
    pages++
  } while (cursor !== null)
  file.end()
  await once(file, "finish")
  const seconds = (performance.now() - started) / 1000
  clearInterval(sampler)
  const after = await heap()
  const peak = Math.max(...rss)
  process.stdout.write(
    `export: ${seq} receipts in ${pages} page(s) of ${limit}, ${mb(served)} MB, ${seconds.toFixed(1)} s = ${Math.round(seq / seconds)} receipts/s (${mb(served / seconds)} MB/s)\n` +
      `gateway RSS: before ${rssBefore.toFixed(0)} MB, during the export ${Math.min(...rss).toFixed(0)}–${peak.toFixed(0)} MB (every 200 ms), peak (VmHWM) ${statusMb("VmHWM").toFixed(0)} MB, after ${statusMb("VmRSS").toFixed(0)} MB\n` +
      `gateway live heap (after a full collection): before ${mb(before.heapUsed)} MB, after ${mb(after.heapUsed)} MB (${after.heapUsed >= before.heapUsed ? "+" : ""}${mb(after.heapUsed - before.heapUsed)} MB)\n`
  )

  // 3. What was served verifies.
  if (!flag("--no-verify")) {
    const cards = join(tmpdir(), `tollgate-export-cards-${process.pid}.json`)
    writeFileSync(cards, JSON.stringify({ data: [RATE_CARD] }))
    const v = await new Promise<string>((done) =>
      execFile(process.execPath, ["bin/tollgate.mjs", "verify", out, "--rate-cards", cards, "--json"], { cwd: root, maxBuffer: 1 << 26 }, (_err, stdout) => done(stdout))
    )
    rmSync(cards)
    const r = JSON.parse(v) as { receipts: number; findings: number; byKind: Record<string, number>; duration_ms: number }
    process.stdout.write(`tollgate verify of the served export: ${r.receipts} receipts, ${r.findings} findings ${JSON.stringify(r.byKind)}, ${(r.duration_ms / 1000).toFixed(1)} s\n`)
  }
} finally {
  await gw.stop()
  rmSync(out, { force: true })
  rmSync(hook, { force: true })
  rmSync(heapFile, { force: true })
}
