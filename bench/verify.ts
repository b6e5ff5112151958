/**
 * `npx tsx bench/verify.ts [--receipts 1000000] [--rounds 3] [--jobs N] [--file PATH] [--keep]`
 *
 * `tollgate verify`'s speed on a large export (issue 43: 1,000,000 receipts verify in flat memory at
 * ≥ 80% of the machine's Ed25519 verify rate), side by side in one run. Writes a signed export of that
 * many receipts with the gateway's own sealing code (test/verify/exportFixture.ts, libsodium signing),
 * one line at a time, with a kept checkpoint of the whole log and the period's signed statement (an
 * existing file of that name is used again with `--keep`); then, each round:
 *   1. the raw Ed25519 verify rate of the same implementation the verifier uses (libsodium through
 *      sodium-native, else node:crypto) on as many threads as the CLI gives its signature workers
 *      (`--jobs`, default the CLI's own default: the available parallelism): each thread checks the
 *      signatures of 20,000 of the export's receipts over their signed bytes, three times, nothing else;
 *   2. the real CLI (bin/tollgate.mjs verify --jobs N, a child process) on the export: its receipts/s,
 *      its RSS sampled from /proc every 200 ms over the run and its peak heap (a --import hook);
 *   3. the raw rate again (a shared machine's load moves: the round's ratio is against the mean of
 *      the two raw measurements around it).
 * Rates per wall second and per CPU second (the process's user + system time, all its threads: on a
 * shared machine the CPU figures are the ones to compare); the medians over rounds.
 * A benchmark: printed, never asserted (docs/decisions/0034).
 */
import { execFile } from "node:child_process"
import { createReadStream, createWriteStream, existsSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { availableParallelism, loadavg, tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { once } from "node:events"
import { createInterface } from "node:readline"
import { Worker } from "node:worker_threads"
import { receiptBytes, unsignedPart, type Receipt } from "../spec/receipt.ts"
import { TotalsAccumulator } from "../spec/statement.ts"
import { fastestEd25519 } from "../src/store/sodium.ts"
import { checkpointOf, chainBodies, exportHeader, makeKey, statementOf } from "../test/verify/exportFixture.ts"
import { arg, flag, numArg } from "./lib/args.ts"
import { median } from "./lib/stats.ts"

const root = resolve(import.meta.dirname, "..")
const n = numArg("--receipts", 1_000_000)
const rounds = numArg("--rounds", 3)
const jobs = numArg("--jobs", availableParallelism())
const file = arg("--file") ?? join(tmpdir(), `tollgate-verify-bench-${n}.jsonl`)
const checkpoints = `${file}.checkpoints`
const statementFile = `${file}.statement.json`
const keep = flag("--keep")

// 1. The export, streamed to disk; the hashes kept (32 bytes of hex each) for the checkpoint.
if (!(keep && existsSync(file) && existsSync(checkpoints) && existsSync(statementFile))) {
  const key = makeKey()
  const started = performance.now()
  const out = createWriteStream(file)
  const write = async (line: string) => {
    if (!out.write(`${line}\n`)) await once(out, "drain")
  }
  await write(exportHeader(key))
  const hashes: Array<string> = []
  const totals = new TotalsAccumulator()
  for (const c of chainBodies({ key, count: n })) {
    await write(c.body)
    hashes.push(c.hash)
    totals.add(c.unsigned)
  }
  out.end()
  await once(out, "finish")
  writeFileSync(checkpoints, checkpointOf(key, hashes))
  writeFileSync(statementFile, JSON.stringify(statementOf(key, totals.totals(), hashes)))
  process.stdout.write(`export written in ${((performance.now() - started) / 1000).toFixed(1)} s\n`)
}
process.stdout.write(`export: ${n} receipts, ${(statSync(file).size / 1e6).toFixed(0)} MB (${file}); ${jobs} signature thread(s); load average ${loadavg().map((x) => x.toFixed(1)).join(" ")}\n`)

// The sample for the raw rate: the export's key and its first 20,000 receipts' signed bytes.
const sample: Array<{ bytes: Uint8Array; sig: Uint8Array }> = []
let publicKey = ""
for await (const line of createInterface({ input: createReadStream(file) })) {
  const v = JSON.parse(line) as Omit<Receipt, "object"> & { object: string; keys?: Array<{ public_key: string }> }
  if (v.object === "receipt_export") publicKey = v.keys![0]!.public_key
  else sample.push({ bytes: new Uint8Array(receiptBytes(unsignedPart(v as Receipt))), sig: new Uint8Array(Buffer.from(v.signature, "base64url")) })
  if (sample.length >= 20_000) break
}
const ed = fastestEd25519()

// 2. The raw rate on `jobs` threads: each checks the sample three times over, nothing else.
const boot = `import(${JSON.stringify(import.meta.resolve("tsx/esm/api"))}).then((t) => { t.register(); return import(${JSON.stringify(
  new URL("./lib/ed25519Loop.ts", import.meta.url).href
)}) })`
const rawThreads = Array.from({ length: jobs }, () => new Worker(boot, { eval: true, workerData: { publicKey, sample } }))
await Promise.all(rawThreads.map((w) => once(w, "message")))
/** Signatures checked per wall second and per CPU second (this process, all threads) by every raw thread at once. */
const raw = async (): Promise<{ wall: number; cpu: number }> => {
  const t0 = performance.now()
  const c0 = process.cpuUsage()
  const counts = await Promise.all(
    rawThreads.map((w) => {
      w.postMessage(3)
      return once(w, "message").then(([m]) => m as number)
    })
  )
  const c = process.cpuUsage(c0)
  const total = counts.reduce((a, b) => a + b, 0)
  if (total !== jobs * 3 * sample.length) throw new Error(`raw: ${total} of ${jobs * 3 * sample.length} signatures verified`)
  return { wall: total / ((performance.now() - t0) / 1000), cpu: total / ((c.user + c.system) / 1e6) }
}

// 3. The CLI on the export, its peak heap sampled from inside and its RSS from /proc.
const hook = join(tmpdir(), `tollgate-verify-bench-heap-${process.pid}.mjs`)
writeFileSync(
  hook,
  `let peak = 0; const t = setInterval(() => { peak = Math.max(peak, process.memoryUsage().heapUsed) }, 50); t.unref();
process.on("exit", () => { peak = Math.max(peak, process.memoryUsage().heapUsed); process.stderr.write("peak_heap_bytes " + peak + "\\n") })\n`
)
const statusKb = (pid: number, field: string): number => {
  try {
    return Number(new RegExp(`^${field}:\\s+(\\d+)`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN)
  } catch {
    return NaN
  }
}
interface CliRun {
  readonly receipts: number
  readonly findings: number
  readonly durationMs: number
  readonly cpuMs: number
  readonly engine: string
  readonly peakHeap: number
  /** VmRSS every 200 ms, MB. */
  readonly rss: ReadonlyArray<number>
  readonly peakRss: number
  readonly code: number
}
const cli = () =>
  new Promise<CliRun>((done) => {
    const rss: Array<number> = []
    let peakRss = NaN
    const child = execFile(
      process.execPath,
      ["--import", hook, "bin/tollgate.mjs", "verify", file, "--checkpoints", checkpoints, "--statement", statementFile, "--jobs", String(jobs), "--json"],
      { cwd: root, maxBuffer: 1 << 26 },
      (err, stdout, stderr) => {
        clearInterval(sampler)
        const r = JSON.parse(stdout) as { receipts: number; findings: number; duration_ms: number; cpu_ms: number; ed25519: string }
        done({
          receipts: r.receipts,
          findings: r.findings,
          durationMs: r.duration_ms,
          cpuMs: r.cpu_ms,
          engine: r.ed25519,
          peakHeap: Number(/peak_heap_bytes (\d+)/.exec(stderr)?.[1] ?? NaN),
          rss,
          peakRss,
          code: err === null ? 0 : (err.code as number)
        })
      }
    )
    const sampler = setInterval(() => {
      const kb = statusKb(child.pid!, "VmRSS")
      if (Number.isFinite(kb)) rss.push(kb / 1024)
      const hwm = statusKb(child.pid!, "VmHWM")
      if (Number.isFinite(hwm)) peakRss = hwm / 1024
    }, 200)
  })

const rows: Array<{ before: { wall: number; cpu: number }; run: CliRun; after: { wall: number; cpu: number } }> = []
try {
  for (let round = 0; round < rounds; round++) {
    const before = await raw()
    const run = await cli()
    const after = await raw()
    rows.push({ before, run, after })
    const wall = run.receipts / (run.durationMs / 1000)
    const cpu = run.receipts / (run.cpuMs / 1000)
    const rawWall = (before.wall + after.wall) / 2
    const rawCpu = (before.cpu + after.cpu) / 2
    const deciles = [0.1, 0.3, 0.5, 0.7, 0.9].map((q) => run.rss[Math.floor(q * (run.rss.length - 1))]!.toFixed(0))
    process.stdout.write(
      `round ${round + 1}: raw ${Math.round(before.wall)} → ${Math.round(after.wall)} /wall s, ${Math.round(before.cpu)} → ${Math.round(after.cpu)} /CPU s; ` +
        `verify exit ${run.code}, ${run.receipts} receipts, ${run.findings} findings, ${(run.durationMs / 1000).toFixed(1)} s, ${Math.round(wall)} /wall s (${((100 * wall) / rawWall).toFixed(1)}%), ` +
        `${Math.round(cpu)} /CPU s (${((100 * cpu) / rawCpu).toFixed(1)}%); RSS at 10/30/50/70/90% of the run ${deciles.join("/")} MB, peak ${run.peakRss.toFixed(0)} MB, heap peak ${(run.peakHeap / 1e6).toFixed(1)} MB\n`
    )
  }
} finally {
  await Promise.all(rawThreads.map((w) => w.terminate()))
  rmSync(hook)
  if (!keep) for (const f of [file, checkpoints, statementFile]) rmSync(f, { force: true })
}
const ratio = (pick: (r: (typeof rows)[number]) => [number, number]) => median(rows.map((r) => pick(r)).map(([a, b]) => a / b))
const m = (f: (r: (typeof rows)[number]) => number) => median(rows.map(f))
process.stdout.write(
  `\nmedians over ${rounds} round(s), ${ed.name}, ${jobs} thread(s) both sides, load average at the end ${loadavg().map((x) => x.toFixed(1)).join(" ")}:\n` +
    `| | per wall second | per CPU second |\n| --- | ---: | ---: |\n` +
    `| raw Ed25519 verify, ${jobs} thread(s) | ${Math.round(m((r) => (r.before.wall + r.after.wall) / 2))} | ${Math.round(m((r) => (r.before.cpu + r.after.cpu) / 2))} |\n` +
    `| tollgate verify --jobs ${jobs}, ${n} receipts | ${Math.round(m((r) => r.run.receipts / (r.run.durationMs / 1000)))} | ${Math.round(m((r) => r.run.receipts / (r.run.cpuMs / 1000)))} |\n` +
    `| ratio (each round against its own raw rate) | ${(100 * ratio((r) => [r.run.receipts / (r.run.durationMs / 1000), (r.before.wall + r.after.wall) / 2])).toFixed(1)}% | ${(
      100 * ratio((r) => [r.run.receipts / (r.run.cpuMs / 1000), (r.before.cpu + r.after.cpu) / 2])
    ).toFixed(1)}% |\n` +
    `memory: RSS peak ${m((r) => r.run.peakRss).toFixed(0)} MB, heap peak ${(m((r) => r.run.peakHeap) / 1e6).toFixed(1)} MB (medians)\n`
)
