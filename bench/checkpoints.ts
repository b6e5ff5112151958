/**
 * `npx tsx bench/checkpoints.ts [--rounds 3] [--duration 10] [--connections 128 | --rate R] [--intervals 0,30000,1000]`
 *
 * Issue 43: "checkpoints and proofs cost the governed call nothing measurable", side by side in one
 * run. The same bundled Tollgate (bench/targets/tollgate.ts, SQLite file, its `npm start` flags) is
 * started once per TOLLGATE_CHECKPOINT_INTERVAL_MS — 0 (the receipt log's background round off: no
 * leaves hashed, no checkpoint signed), the default 30,000, and 1,000 (a round every second, 30×
 * the default) — and each takes the saturating closed loop in turn, the order rotated each round.
 * Per target: calls/s and the gateway process's CPU µs a call (main thread and all threads,
 * /proc/<pid>/task/*), each the median over rounds, and the log's size after the run as the target's
 * GET /v1/receipts/checkpoint states it (how much of its chain the rounds covered). The governed call
 * itself does no Merkle work (the round reads the receipts already written); this bench says what
 * the round costs the calls running next to it. Printed, never asserted.
 */
import { join, resolve } from "node:path"
import { arg, numArg } from "./lib/args.ts"
import { bundleTarget, startFlags } from "./lib/bundle.ts"
import { closedLoad, openLoad } from "./lib/load.ts"
import { cpuSplit, sampleProc, startChild } from "./lib/procs.ts"
import { median } from "./lib/stats.ts"

const here = import.meta.dirname
const root = resolve(here, "..")
const intervals = (arg("--intervals") ?? "0,30000,1000").split(",")
const durationMs = numArg("--duration", 10) * 1000
const connections = numArg("--connections", 128)
const rounds = numArg("--rounds", 3)
/** `--rate R`: an open loop of R calls/s instead of the saturating closed loop — the round's CPU a call at a fixed load, where saturation's calls/s swing with whatever else the box runs. */
const rate = numArg("--rate", 0)
/** A target's name: its interval, with "#2", "#3" on a repeat (`--intervals 0,0,30000,1000`: off twice, the spread of two equal targets, i.e. the noise). */
const names = intervals.map((i, k) => {
  const base = i === "0" ? "off (0)" : `${i} ms`
  const repeat = intervals.slice(0, k).filter((j) => j === i).length
  return repeat === 0 ? base : `${base} #${repeat + 1}`
})

const body = (n: number) =>
  JSON.stringify({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: `Where is my order 48213-CX? (${n})` }],
    max_tokens: 400,
    metadata: { idempotency_key: `cp-${Date.now().toString(36)}-${n}` }
  })

const mock = await startChild<{ port: number }>("mock", process.execPath, ["--import", "tsx", join(here, "targets/mock.ts"), "--delay", "20"], { cwd: root })
const upstream = `http://127.0.0.1:${mock.ready.port}`
const entry = bundleTarget(root, "targets/tollgate.ts", "checkpoints")
const targets = intervals.map((_, k) => k)
const started = new Map<number, { pid: number; stop: () => Promise<void>; origin: string; key: string }>()
const rows = new Map<number, { rps: Array<number>; main: Array<number>; all: Array<number>; errors: number }>()
try {
  for (const k of targets) {
    const child = await startChild<{ port: number; key: string }>(names[k]!, process.execPath, [...startFlags(root), entry, "--upstream", upstream, "--model", "gpt-4o-mini"], {
      cwd: root,
      timeoutMs: 60_000,
      env: { TOLLGATE_CHECKPOINT_INTERVAL_MS: intervals[k]! }
    })
    started.set(k, { pid: child.pid, stop: child.stop, origin: `http://127.0.0.1:${child.ready.port}`, key: child.ready.key })
    rows.set(k, { rps: [], main: [], all: [], errors: 0 })
  }
  for (let round = 0; round < rounds; round++) {
    for (const i of targets.map((k) => (k + round) % targets.length)) {
      const s = started.get(i)!
      const endpoint = { name: names[i]!, origin: s.origin, path: "/v1/chat/completions", headers: { authorization: `Bearer ${s.key}` } }
      await closedLoad(endpoint, { connections: 32, durationMs: 2000, body: (n) => body(-n - 1 - round * 1e6) })
      const before = sampleProc(s.pid)
      const r =
        rate > 0
          ? await openLoad(endpoint, { rate, durationMs, stream: false, body: (n) => body(n + round * 1e6) })
          : await closedLoad(endpoint, { connections, durationMs, body: (n) => body(n + round * 1e6) })
      const after = sampleProc(s.pid)
      const split = cpuSplit(s.pid, before, after)
      const row = rows.get(i)!
      row.rps.push(r.achievedRps)
      row.main.push((split.main * 1000) / r.ok)
      row.all.push(((after.cpuMs - before.cpuMs) * 1000) / r.ok)
      row.errors += r.errors
      console.log(`round ${round + 1} ${names[i]}: ${r.achievedRps.toFixed(0)} calls/s, ${(((after.cpuMs - before.cpuMs) * 1000) / r.ok).toFixed(0)} µs CPU a call, ${r.errors} errors`)
    }
  }
  const sizes = new Map<number, string>()
  for (const i of targets) {
    const s = started.get(i)!
    const res = await fetch(`${s.origin}/v1/receipts/checkpoint`, { headers: { authorization: `Bearer ${s.key}` } })
    sizes.set(i, res.status === 200 ? (await res.text()).split("\n")[1]! : `none (${res.status})`)
  }
  const receipts = new Map<number, string>()
  for (const i of targets) {
    const s = started.get(i)!
    const res = await fetch(`${s.origin}/v1/usage`, { headers: { authorization: `Bearer ${s.key}` } })
    const u = (await res.json()) as { requests?: number }
    receipts.set(i, String(u.requests ?? "?"))
  }
  const load = (await import("node:os")).loadavg().map((x) => x.toFixed(1)).join(" ")
  console.log(`\n| TOLLGATE_CHECKPOINT_INTERVAL_MS (${rate > 0 ? `open loop, ${rate} calls/s` : `closed loop, ${connections} connections`}, ${rounds} × ${durationMs / 1000} s, medians) | ${names.join(" | ")} |`)
  console.log(`| --- | ${targets.map(() => "---:").join(" | ")} |`)
  console.log(`| calls/s, each round | ${targets.map((i) => rows.get(i)!.rps.map((x) => x.toFixed(0)).join(" / ")).join(" | ")} |`)
  console.log(`| calls/s, median | ${targets.map((i) => median(rows.get(i)!.rps).toFixed(0)).join(" | ")} |`)
  console.log(`| gateway CPU µs a call, all threads | ${targets.map((i) => median(rows.get(i)!.all).toFixed(0)).join(" | ")} |`)
  console.log(`| — main thread | ${targets.map((i) => median(rows.get(i)!.main).toFixed(0)).join(" | ")} |`)
  console.log(`| errors | ${targets.map((i) => rows.get(i)!.errors).join(" | ")} |`)
  console.log(`| the log's latest checkpoint, tree size, after the run | ${targets.map((i) => sizes.get(i)).join(" | ")} |`)
  console.log(`| requests this window (/v1/usage) | ${targets.map((i) => receipts.get(i)).join(" | ")} |`)
  console.log(`load average at the end: ${load}`)
} finally {
  for (const s of started.values()) await s.stop()
  await mock.stop()
}
