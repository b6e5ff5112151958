/**
 * `npx tsx bench/profile.ts [--target tollgate|floor|pg] [--instances N] [--duration 10] [--connections 32] [--stream] [--out DIR] [--db memory] [--alloc | --survivors]`
 *
 * Profiles Tollgate's chat path (or, with `--target floor`, the governed floor's, by the same toggles:
 * bench/lib/profilers.ts, so the two compare per call): starts the bench mock upstream and a Tollgate child, warms it up,
 * then records a V8 CPU profile (inspector, toggled by SIGUSR2 in bench/lib/profilers.ts) over
 * exactly the measured closed-loop load (unique idempotency keys), and prints where the CPU went
 * (self time by function and by package). Open the .cpuprofile in Chrome DevTools or speedscope.
 * Effect's fibers run from its scheduler, so JS stacks do not show the logical caller: read self
 * time, and confirm a suspicion with an A/B run of `npm run bench`.
 *
 * `--alloc` records V8's sampling heap profile instead (every sampled allocation of the main thread,
 * freed ones included) and prints the bytes allocated per request by function and by file: what feeds
 * the young generation's scavenges and the GC helper threads' CPU (docs/decisions/0028).
 * `--survivors` (implies `--alloc`) keeps only the sampled objects that outlived a scavenge: what a
 * scavenge has to copy or promote, and what fills the old generation between full GCs.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { arg, flag, numArg } from "./lib/args.ts"
import { closedLoad } from "./lib/load.ts"
import { sampleProc, startChild } from "./lib/procs.ts"

const here = dirname(fileURLToPath(import.meta.url))
const root = resolve(here, "..")
const out = resolve(arg("--out") ?? mkdtempSync(join(tmpdir(), "tollgate-prof-")))
mkdirSync(out, { recursive: true })
const durationMs = numArg("--duration", 10) * 1000
const connections = numArg("--connections", 32)
const stream = flag("--stream")

const body = (n: number) =>
  JSON.stringify({
    model: "gpt-4o-mini",
    messages: [
      { role: "system", content: "You are a concise assistant for an e-commerce support team." },
      { role: "user", content: `Where is my order 48213-CX? It has said 'label created' since Monday. (${n})` }
    ],
    max_tokens: 400,
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    metadata: { idempotency_key: `prof-${Date.now().toString(36)}-${n}` }
  })

const mock = await startChild<{ port: number }>("mock", process.execPath, ["--import", "tsx", join(here, "targets/mock.ts"), "--delay", "20"], { cwd: root })
// Never leave a child behind, whatever fails below.
process.once("exit", () => {
  try {
    process.kill(mock.pid, "SIGKILL")
  } catch {
    // already gone
  }
})
// `--survivors`: only the sampled objects that outlived a scavenge (promoted to the old generation,
// freed by a later full GC or still alive): what makes a scavenge slow and feeds the old generation.
const survivors = flag("--survivors")
const alloc = flag("--alloc") || survivors
const target = arg("--target") ?? "tollgate"
if (target !== "tollgate" && target !== "floor" && target !== "pg") throw new Error(`--target tollgate|floor|pg, not ${target}`)
const script = { tollgate: "targets/tollgate.ts", floor: "targets/governedFloor.ts", pg: "targets/tollgatePg.ts" }[target]
const profileFile = join(out, `${target}-${Date.now()}.${alloc ? "heapprofile" : "cpuprofile"}`)
const tollgate = await startChild<{ port: number; key: string }>(
  "tollgate",
  process.execPath,
  [
    "--import",
    "tsx",
    join(here, script),
    "--upstream",
    `http://127.0.0.1:${mock.ready.port}`,
    alloc ? "--alloc-profile" : "--profile",
    profileFile,
    ...(survivors ? ["--alloc-survivors"] : []),
    ...(arg("--db") === undefined ? [] : ["--db", arg("--db")!]),
    // `--target pg --instances N`: N instances behind the balancer; the profile is instance 0's (this target's own process).
    ...(arg("--instances") === undefined ? [] : ["--instances", arg("--instances")!])
  ],
  { cwd: root, timeoutMs: 60_000 }
)
process.once("exit", () => {
  try {
    process.kill(tollgate.pid, "SIGKILL")
  } catch {
    // already gone
  }
})
const endpoint = {
  name: "tollgate",
  origin: `http://127.0.0.1:${tollgate.ready.port}`,
  path: "/v1/chat/completions",
  headers: { authorization: `Bearer ${tollgate.ready.key}` }
}
// Warm-up (JIT, caches), then profile exactly the measured phase.
await closedLoad(endpoint, { connections: 8, durationMs: 3000, body: (n) => body(-n - 1) })
const before = sampleProc(tollgate.pid)
process.kill(tollgate.pid, "SIGUSR2")
const r = await closedLoad(endpoint, { connections, durationMs, body })
process.kill(tollgate.pid, "SIGUSR2")
const after = sampleProc(tollgate.pid)
for (let i = 0; i < 100 && !existsSync(profileFile); i++) await new Promise((res) => setTimeout(res, 100))
await new Promise((res) => setTimeout(res, 300))
await tollgate.stop()
await mock.stop()
console.log(
  `${r.ok} ok, ${r.errors} errors, ${r.achievedRps.toFixed(0)} RPS, p50 ${r.latencyMs.p50} ms p99 ${r.latencyMs.p99} ms, ` +
    `${(((after.cpuMs - before.cpuMs) * 1000) / Math.max(1, r.ok)).toFixed(0)} µs CPU per request`
)

if (alloc) {
  interface AllocNode {
    callFrame: { functionName: string; url: string; lineNumber: number }
    selfSize: number
    children: Array<AllocNode>
  }
  const { head } = JSON.parse(readFileSync(profileFile, "utf8")) as { head: AllocNode }
  const byFn = new Map<string, number>()
  const byFile = new Map<string, number>()
  let total = 0
  const walk = (n: AllocNode) => {
    if (n.selfSize > 0) {
      const { functionName, url, lineNumber } = n.callFrame
      const short = url.replace(/^file:\/\//, "").replace(root + "/", "")
      const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(short)?.[1] ?? (short === "" ? functionName : short)
      const key = `${functionName || "(anonymous)"}  ${short}:${lineNumber + 1}`
      byFn.set(key, (byFn.get(key) ?? 0) + n.selfSize)
      byFile.set(pkg, (byFile.get(pkg) ?? 0) + n.selfSize)
      total += n.selfSize
    }
    for (const c of n.children) walk(c)
  }
  walk(head)
  const perReq = (bytes: number) => `${(bytes / Math.max(1, r.ok) / 1024).toFixed(2).padStart(7)} KiB/req`
  const showBytes = (title: string, m: Map<string, number>, k: number) => {
    console.log(`\n${title} (main thread, ${perReq(total).trim()} in all)`)
    for (const [name, bytes] of [...m].sort((a, b) => b[1] - a[1]).slice(0, k)) console.log(`${perReq(bytes)}  ${((bytes / total) * 100).toFixed(1).padStart(5)}%  ${name}`)
  }
  const what = survivors ? "bytes that outlived a scavenge" : "allocated bytes"
  showBytes(`${what} by package / file`, byFile, 25)
  showBytes(`${what} by function`, byFn, 40)
  console.log(`\nprofile: ${profileFile}`)
  process.exit(0)
}

interface Node {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  children?: Array<number>
}
const profile = JSON.parse(readFileSync(profileFile, "utf8")) as {
  nodes: Array<Node>
  startTime: number
  endTime: number
  samples: Array<number>
  timeDeltas: Array<number>
}
const hits = new Map<number, number>()
for (const id of profile.samples) hits.set(id, (hits.get(id) ?? 0) + 1)
const inWindow = profile.samples.length
const usPerSample = (profile.endTime - profile.startTime) / Math.max(1, inWindow)
const byFn = new Map<string, number>()
const byPkg = new Map<string, number>()
let total = 0
for (const n of profile.nodes) {
  const count = hits.get(n.id) ?? 0
  if (count === 0) continue
  const { functionName, url, lineNumber } = n.callFrame
  if (functionName === "(idle)" || functionName === "(program)") continue
  total += count
  const short = url.replace(/^file:\/\//, "").replace(root + "/", "")
  const key = `${functionName || "(anonymous)"}  ${short}:${lineNumber + 1}`
  byFn.set(key, (byFn.get(key) ?? 0) + count)
  const pkg =
    /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(short)?.[1] ??
    (short.startsWith("src/") || short.startsWith("spec/") || short.startsWith("bench/") ? short : short === "" ? functionName : `node:${short.split("/")[0]}`)
  byPkg.set(pkg, (byPkg.get(pkg) ?? 0) + count)
}
const show = (title: string, m: Map<string, number>, k: number) => {
  console.log(`\n${title} (measured phase: ${total} busy samples of ${inWindow}, ≈ ${((total * usPerSample) / 1000).toFixed(0)} ms busy)`)
  for (const [name, hits] of [...m].sort((a, b) => b[1] - a[1]).slice(0, k)) {
    console.log(`${((hits / total) * 100).toFixed(1).padStart(5)}%  ${((hits * usPerSample) / Math.max(1, r.ok)).toFixed(1).padStart(6)} µs/req  ${name}`)
  }
}
show("self time by package / file", byPkg, 25)
show("self time by function", byFn, 40)
console.log(`\nprofile: ${profileFile}`)
