/**
 * `npx tsx bench/verify.ts [--receipts 1000000] [--file PATH] [--keep]`
 *
 * `tollgate verify`'s speed on a large export (issue 43: 1,000,000 receipts verify in flat memory at
 * ≥ 80% of the machine's Ed25519 verify rate). Writes a signed export of that many receipts with the
 * gateway's own sealing code (test/verify/exportFixture.ts, libsodium signing), one line at a time,
 * with a kept checkpoint of the whole log and the period's signed statement; then
 *   1. measures the raw Ed25519 verify rate of the same implementation the verifier uses (libsodium
 *      through sodium-native, else node:crypto) on this machine: the signatures of 20,000 of the
 *      export's receipts over their signed bytes, nothing else;
 *      (wall and CPU time: on a shared machine the CPU-time rates are the ones to compare);
 *   2. runs the real CLI (bin/tollgate.mjs verify, a child process) on the export and reads its
 *      receipts/s and the child's peak heap (sampled by a --import hook printing
 *      process.memoryUsage().heapUsed at intervals, and the peak RSS from /proc).
 * A benchmark: printed, never asserted (docs/decisions/0034).
 */
import { execFile } from "node:child_process"
import { createPublicKey } from "node:crypto"
import { createWriteStream, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { once } from "node:events"
import { receiptBytes, unsignedPart, type Receipt } from "../spec/receipt.ts"
import { TotalsAccumulator } from "../spec/statement.ts"
import { fastestEd25519 } from "../src/store/sodium.ts"
import { checkpointOf, chainBodies, exportHeader, makeKey, statementOf } from "../test/verify/exportFixture.ts"
import { arg, flag, numArg } from "./lib/args.ts"

const root = resolve(import.meta.dirname, "..")
const n = numArg("--receipts", 1_000_000)
const file = arg("--file") ?? join(tmpdir(), `tollgate-verify-bench-${n}.jsonl`)
const key = makeKey()

// 1. The export, streamed to disk; the hashes kept (32 bytes of hex each) for the checkpoint.
const started = performance.now()
const out = createWriteStream(file)
const write = async (line: string) => {
  if (!out.write(`${line}\n`)) await once(out, "drain")
}
await write(exportHeader(key))
const hashes: Array<string> = []
const totals = new TotalsAccumulator()
const sample: Array<Receipt> = []
for (const c of chainBodies({ key, count: n })) {
  await write(c.body)
  hashes.push(c.hash)
  totals.add(c.unsigned)
  if (sample.length < 20_000) sample.push(JSON.parse(c.body) as Receipt)
}
out.end()
await once(out, "finish")
const checkpoints = join(tmpdir(), `tollgate-verify-bench-${n}.checkpoints`)
writeFileSync(checkpoints, checkpointOf(key, hashes))
const statementFile = join(tmpdir(), `tollgate-verify-bench-${n}.statement.json`)
writeFileSync(statementFile, JSON.stringify(statementOf(key, totals.totals(), hashes)))
process.stdout.write(`export: ${n} receipts, ${(statSync(file).size / 1e6).toFixed(0)} MB, written in ${((performance.now() - started) / 1000).toFixed(1)} s (${file})\n`)

// 2. The raw Ed25519 verify rate of the same implementation.
const ed = fastestEd25519()
const check = ed.checkFor(createPublicKey(key.entry.public_key))
const signed = sample.map((r) => ({ bytes: receiptBytes(unsignedPart(r)), sig: Buffer.from(r.signature, "base64url") }))
let ok = 0
/** Signatures checked per wall second and per CPU second, over 3 rounds. */
const rawRound = (): { wall: number; cpu: number } => {
  const t0 = performance.now()
  const c0 = process.cpuUsage()
  for (const s of signed) if (check(s.bytes, s.sig)) ok++
  const c = process.cpuUsage(c0)
  return { wall: signed.length / ((performance.now() - t0) / 1000), cpu: signed.length / ((c.user + c.system) / 1e6) }
}
const rawRates = [rawRound(), rawRound(), rawRound()]
const printRaw = (when: string, rates: ReadonlyArray<{ wall: number; cpu: number }>) =>
  process.stdout.write(
    `raw Ed25519 verify ${when} (${ed.name}, one thread): per wall s ${rates.map((r) => Math.round(r.wall)).join(", ")}; per CPU s ${rates.map((r) => Math.round(r.cpu)).join(", ")} ` +
      `(${ok} verified so far)\n`
  )
printRaw("before", rawRates)

// 3. The CLI on the export, its peak heap sampled from inside.
const hook = join(tmpdir(), `tollgate-verify-bench-heap-${process.pid}.mjs`)
writeFileSync(
  hook,
  `let peak = 0; const t = setInterval(() => { peak = Math.max(peak, process.memoryUsage().heapUsed) }, 50); t.unref();
process.on("exit", () => { peak = Math.max(peak, process.memoryUsage().heapUsed); process.stderr.write("peak_heap_bytes " + peak + "\\n") })\n`
)
const run = await new Promise<{ code: number; stdout: string; stderr: string }>((done) =>
  execFile(
    process.execPath,
    ["--import", hook, "bin/tollgate.mjs", "verify", file, "--checkpoints", checkpoints, "--statement", statementFile, "--json"],
    { cwd: root, maxBuffer: 1 << 26 },
    (err, stdout, stderr) => done({ code: err === null ? 0 : (err.code as number), stdout, stderr })
  )
)
// The raw rate again after the run (a shared machine's load moves): the ratios use the best of all six rounds.
const after = [rawRound(), rawRound(), rawRound()]
printRaw("after", after)
rawRates.push(...after)
const rawWall = Math.max(...rawRates.map((r) => r.wall))
const rawCpu = Math.max(...rawRates.map((r) => r.cpu))
const result = JSON.parse(run.stdout) as { receipts: number; findings: number; duration_ms: number; cpu_ms: number; ed25519: string }
const peak = Number(/peak_heap_bytes (\d+)/.exec(run.stderr)?.[1] ?? NaN)
const wallRate = result.receipts / (result.duration_ms / 1000)
const cpuRate = result.receipts / (result.cpu_ms / 1000)
process.stdout.write(
  `tollgate verify: exit ${run.code}, ${result.receipts} receipts, ${result.findings} findings, ${(result.duration_ms / 1000).toFixed(1)} s wall, ${(result.cpu_ms / 1000).toFixed(1)} s CPU (${result.ed25519})\n` +
    `  per wall s: ${Math.round(wallRate)} receipts/s = ${((100 * wallRate) / rawWall).toFixed(1)}% of the best raw wall rate\n` +
    `  per CPU s:  ${Math.round(cpuRate)} receipts/s = ${((100 * cpuRate) / rawCpu).toFixed(1)}% of the best raw CPU rate\n` +
    `  peak heap ${(peak / 1e6).toFixed(1)} MB\n`
)
rmSync(hook)
if (!flag("--keep")) for (const f of [file, checkpoints, statementFile]) rmSync(f, { force: true })
