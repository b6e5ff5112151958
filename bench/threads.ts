/**
 * `npx tsx bench/threads.ts [--targets floor,tollgate] [--duration 8] [--connections 512] [--rounds 2] [--compare DIR] [--stream]`
 *
 * Where a governed target's CPU goes under the saturating closed loop, thread by thread, next to the
 * main thread's garbage-collector pauses per call (bench/lib/gcObserver.mjs): the CPU as µs per call,
 * split as bench/run.ts splits it (bench/lib/procs.ts `cpuSplit`: the main thread, the busiest other
 * thread — the store worker —, the rest — V8's GC helpers, libuv's pool), summed over rounds. Both targets run bundled with their `npm start`
 * flags, as bench/run.ts runs them, interleaved round by round; `--node-flags "…"` adds flags to both;
 * `--compare DIR` adds `tollgate-b`, Tollgate from another checkout (an A/B in one run). `--stream`
 * sends streamed calls (the mock's 20 events, 1 ms apart) instead of whole completions. The target
 * `tollgate-webhook` is Tollgate with a webhook endpoint registered for every event type (issue 42);
 * `tollgate-scoped` Tollgate with a key budget and an end-user default budget, every call naming one of
 * 50 end users (issue 41: held in three scopes, against `tollgate`'s two).
 * A benchmark: printed, never asserted (docs/decisions/0034).
 */
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { arg, flag, numArg } from "./lib/args.ts"
import { bundleTarget, startFlags } from "./lib/bundle.ts"
import { closedLoad } from "./lib/load.ts"
import { cpuSplit, sampleProc, signalForJson, startChild } from "./lib/procs.ts"
import { median } from "./lib/stats.ts"

const here = import.meta.dirname
const root = resolve(here, "..")
const compare = arg("--compare")
const targets = [...(arg("--targets") ?? "floor,tollgate").split(","), ...(compare === undefined ? [] : ["tollgate-b"])]
const durationMs = numArg("--duration", 8) * 1000
const connections = numArg("--connections", 512)
const rounds = numArg("--rounds", 2)
const stream = flag("--stream")
const nodeFlags = (arg("--node-flags") ?? "").split(" ").filter((f) => f !== "")
const gcFile = (t: string) => join(tmpdir(), `tollgate-threads-gc-${process.pid}-${t}.json`)
type Pause = [number, number, string]
const gcTotals = new Map<string, Map<string, [number, number]>>()

/** `user`: the end user a call names (tollgate-scoped: one of 50, round robin), else none. */
const body = (n: number, user?: string) =>
  JSON.stringify({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: `Where is my order 48213-CX? (${n})` }],
    max_tokens: 400,
    ...(user === undefined ? {} : { user }),
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    metadata: { idempotency_key: `thr-${Date.now().toString(36)}-${n}` }
  })

const mock = await startChild<{ port: number }>("mock", process.execPath, ["--import", "tsx", join(here, "targets/mock.ts"), "--delay", "20"], { cwd: root })
const upstream = `http://127.0.0.1:${mock.ready.port}`
const started = new Map<string, { pid: number; stop: () => Promise<void>; origin: string; key: string }>()
const users = new Map<string, (n: number) => string | undefined>()
for (const t of targets) {
  const script = t === "floor" ? "targets/governedFloor.ts" : "targets/tollgate.ts"
  const userOf = t === "tollgate-scoped" ? (n: number) => `user-${Math.abs(n) % 50}` : () => undefined
  users.set(t, userOf)
  // `tollgate-webhook`: Tollgate with a webhook endpoint registered for every event (issue 42).
  // `tollgate-scoped`: a key budget and an end-user budget set, each call naming an end user (issue 41).
  const extra = t === "tollgate-webhook" ? ["--webhook"] : t === "tollgate-scoped" ? ["--scoped"] : []
  const dir = t === "tollgate-b" ? resolve(compare!) : root
  const entry = bundleTarget(dir, script, `threads-${t}`)
  const child = await startChild<{ port: number; key: string }>(t, process.execPath, [...startFlags(dir), ...nodeFlags, "--import", join(here, "lib/gcObserver.mjs"), entry, "--upstream", upstream, "--model", "gpt-4o-mini", ...extra], {
    cwd: dir,
    timeoutMs: 60_000,
    env: { TOLLGATE_BENCH_GC_FILE: gcFile(t), ...(t === "tollgate-webhook" ? { TOLLGATE_WEBHOOK_ALLOW_PRIVATE: "1" } : {}) }
  })
  started.set(t, { pid: child.pid, stop: child.stop, origin: `http://127.0.0.1:${child.ready.port}`, key: child.ready.key })
}
/** CPU ms of the measured phases, summed over rounds: the main thread, the busiest other thread (the store worker), the rest. */
const totals = new Map<string, { main: number; busiestOther: number; rest: number }>()
const calls = new Map<string, number>()
const rps = new Map<string, Array<number>>()
/** The process's CPU µs a call (all threads), each round: their median sets targets side by side (rounds shared with other work vary). */
const cpuRounds = new Map<string, Array<number>>()
/** What `tollgate-webhook`'s /metrics said of its deliveries at the end (the bench's traffic crosses no threshold: none expected). */
let webhookAttempts = ""
try {
  for (let round = 0; round < rounds; round++) {
    // Rotated each round, as bench/run.ts does: no target always runs first or last.
    for (const t of targets.map((_, i) => targets[(i + round) % targets.length]!)) {
      const s = started.get(t)!
      const endpoint = { name: t, origin: s.origin, path: "/v1/chat/completions", headers: { authorization: `Bearer ${s.key}` } }
      const userOf = users.get(t)!
      await closedLoad(endpoint, { connections: 64, durationMs: 2000, body: (n) => body(-n - 1 - round * 1e6, userOf(n)) })
      await signalForJson<Array<Pause>>(s.pid, gcFile(t))
      const before = sampleProc(s.pid)
      const r = await closedLoad(endpoint, { connections, durationMs, body: (n) => body(n + round * 1e6, userOf(n)) })
      const after = sampleProc(s.pid)
      const pauses = await signalForJson<Array<Pause>>(s.pid, gcFile(t))
      const g = gcTotals.get(t) ?? new Map<string, [number, number]>()
      for (const [, ms, kind] of pauses) {
        const [n, total] = g.get(kind) ?? [0, 0]
        g.set(kind, [n + 1, total + ms])
      }
      gcTotals.set(t, g)
      const split = cpuSplit(s.pid, before, after)
      const sum = totals.get(t) ?? { main: 0, busiestOther: 0, rest: 0 }
      totals.set(t, { main: sum.main + split.main, busiestOther: sum.busiestOther + split.busiestOther, rest: sum.rest + split.rest })
      calls.set(t, (calls.get(t) ?? 0) + r.ok)
      rps.set(t, [...(rps.get(t) ?? []), r.achievedRps])
      cpuRounds.set(t, [...(cpuRounds.get(t) ?? []), ((split.main + split.busiestOther + split.rest) * 1000) / r.ok])
      console.log(`round ${round + 1} ${t}: ${r.achievedRps.toFixed(0)} RPS, ${r.errors} errors`)
    }
  }
  const hooked = started.get("tollgate-webhook")
  if (hooked !== undefined) {
    const metrics = await (await fetch(`${hooked.origin}/metrics`, { headers: { authorization: "Bearer bench-admin-token" } })).text()
    webhookAttempts = metrics.split("\n").filter((l) => l.startsWith("tollgate_webhook_")).join("; ")
  }
} finally {
  for (const s of started.values()) await s.stop()
  await mock.stop()
}
/** µs a call: main, busiest other, rest, all. */
const perCall = (t: string): ReadonlyArray<string> => {
  const { main, busiestOther, rest } = totals.get(t)!
  return [main, busiestOther, rest, main + busiestOther + rest].map((ms) => ((ms * 1000) / calls.get(t)!).toFixed(0))
}
console.log(`\n| CPU µs a call, closed loop${stream ? ", streamed" : ""} (${connections} connections, ${rounds} × ${durationMs / 1000} s) | ${targets.join(" | ")} |`)
console.log(`| --- | ${targets.map(() => "---:").join(" | ")} |`)
console.log(`| RPS, each round | ${targets.map((t) => rps.get(t)!.map((x) => x.toFixed(0)).join(" / ")).join(" | ")} |`)
;["main thread", "busiest other thread (the store worker)", "the rest (V8's GC helpers, libuv's pool)", "all"].forEach((label, i) =>
  console.log(`| ${label} | ${targets.map((t) => perCall(t)[i]).join(" | ")} |`)
)
console.log(`| CPU µs a call (all threads), median of the rounds [each round] | ${targets.map((t) => `${median(cpuRounds.get(t)!).toFixed(0)} [${cpuRounds.get(t)!.map((x) => x.toFixed(0)).join(" / ")}]`).join(" | ")} |`)
console.log(`| calls/s, median of the rounds | ${targets.map((t) => median(rps.get(t)!).toFixed(0)).join(" | ")} |`)
if (webhookAttempts !== "") console.log(`tollgate-webhook at the end: ${webhookAttempts}`)
for (const t of targets) {
  const n = calls.get(t)!
  console.log(`${t}: main-thread GC pauses ` + [...gcTotals.get(t)!].map(([k, [c, ms]]) => `${k} ${((c * 1000) / n).toFixed(1)} per 1,000 calls, ${((ms * 1000) / n).toFixed(1)} µs a call`).join("; "))
}
