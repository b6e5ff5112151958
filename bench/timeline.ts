/**
 * `npx tsx bench/timeline.ts [--calls N] [--warmup N] [--delay MS] [--gap MS] [--stream]`: where the latency of
 * ONE governed call goes (issue 18). Tollgate (bench/targets/tollgate.ts, from sources, a file store)
 * runs with TOLLGATE_TIMELINE=1 in front of the bench mock; this process sends sequential calls, one
 * in flight, each with its own idempotency key, and prints the median and p90 of every stage the
 * call's marks name (src/domain/timeline.ts) over the measured calls. Stages marked "(in worker)" are
 * the store worker's share of the round trip before them, not extra time; a "hand-off" row is the
 * whole hand-off (until posted + round trip, per call), not extra time either.
 *
 * It also prints the target's CPU per call (/proc) and the calls' latency p50 / p99. `--no-timeline`
 * runs the target without TOLLGATE_TIMELINE, and `--dir DIR` runs the target of another checkout
 * (which may not have the timeline: it implies `--no-timeline`), for an A/B of CPU and latency.
 *
 * `--gap MS` pauses between calls (0 by default): what the previous call still does after its
 * response ends (its finalizers, the upstream's drain, the client's own work) then no longer lands
 * on the next call's stages.
 *
 * The figures are wall time on a shared machine: compare a before and an after run back to back.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { request } from "undici"
import type { StageFigures, TailFigures } from "../src/domain/timeline.ts"
import { arg, flag, numArg } from "./lib/args.ts"
import { sampleProc, startChild } from "./lib/procs.ts"
import { f0, f2, summarize } from "./lib/stats.ts"

const here = dirname(fileURLToPath(import.meta.url))
const root = resolve(here, "..")
const calls = numArg("--calls", 300)
const warmup = numArg("--warmup", 100)
const stream = flag("--stream")
const gapMs = numArg("--gap", 0)
const dir = resolve(arg("--dir") ?? root)
const timed = !flag("--no-timeline") && arg("--dir") === undefined
const model = "gpt-4o-mini"
const out = join(mkdtempSync(join(tmpdir(), "tollgate-timeline-")), "timeline.json")

const mock = await startChild<{ port: number }>("mock", process.execPath, ["--import", "tsx", join(here, "targets/mock.ts"), "--delay", String(numArg("--delay", 20))], { cwd: root })
const target = await startChild<{ port: number; key: string }>(
  "tollgate",
  process.execPath,
  ["--import", "tsx", join(dir, "bench/targets/tollgate.ts"), "--upstream", `http://127.0.0.1:${mock.ready.port}`, "--model", model, ...(timed ? ["--timeline", out] : [])],
  { cwd: dir, env: timed ? { TOLLGATE_TIMELINE: "1" } : {}, timeoutMs: 60_000 }
)

const runId = Date.now().toString(36)
const call = async (n: number) => {
  const res = await request(`http://127.0.0.1:${target.ready.port}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${target.ready.key}`, "content-type": "application/json" },
    body: JSON.stringify({
      model,
      messages: [{ role: "user", content: "Where is my order 48213-CX? The tracking page has said 'label created' since Monday." }],
      max_tokens: 400,
      ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
      metadata: { idempotency_key: `timeline-${runId}-${n}` }
    })
  })
  await res.body.text()
  if (res.statusCode !== 200) throw new Error(`call ${n} answered ${res.statusCode}`)
}
const latencies: Array<number> = []

/** What bench/targets/tollgate.ts writes on SIGUSR1. */
type Figures = { readonly stages: ReadonlyArray<StageFigures>; readonly tail?: TailFigures }

/** Ask the target for its figures since the last ask (SIGUSR1), and wait for the file. */
const collect = async (): Promise<Figures> => {
  rmSync(out, { force: true })
  process.kill(target.pid, "SIGUSR1")
  for (let waited = 0; waited < 10_000; waited += 50) {
    await new Promise((r) => setTimeout(r, 50))
    if (existsSync(out)) return JSON.parse(readFileSync(out, "utf8")) as Figures
  }
  throw new Error("the target wrote no timeline")
}

try {
  for (let n = 0; n < warmup; n++) await call(n)
  if (timed) await collect()
  const cpuBefore = sampleProc(target.pid).cpuMs
  for (let n = 0; n < calls; n++) {
    const t0 = performance.now()
    await call(warmup + n)
    latencies.push(performance.now() - t0)
    if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs))
  }
  const cpuUs = ((sampleProc(target.pid).cpuMs - cpuBefore) * 1000) / calls
  const latency = summarize(Float64Array.from(latencies))
  process.stdout.write(`\n${dir}: ${calls} calls${gapMs > 0 ? ` ${gapMs} ms apart` : ""}, target CPU ${f0(cpuUs)} µs per call (main thread and worker, /proc), latency p50 ${f2(latency.p50)} / p99 ${f2(latency.p99)} ms\n`)
  const { stages: figures, tail } = timed ? await collect() : { stages: [], tail: undefined }
  if (timed) {
    process.stdout.write(`\nOne governed call, ${stream ? "streamed" : "non-streamed"}: ${calls} sequential calls after ${warmup} warm-up, ms (TOLLGATE_TIMELINE=1)\n\n`)
    process.stdout.write("| stage | p50 ms | p90 ms | p99 ms | calls | > p50 + 1 ms |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
    let total = 0
    for (const s of figures) {
      // A span (a hand-off timed whole, the worker's share of it) lies inside the marks' stages.
      if (!s.span) total += s.p50Ms
      process.stdout.write(`| ${s.stage} | ${f2(s.p50Ms)} | ${f2(s.p90Ms)} | ${f2(s.p99Ms)} | ${s.n} | ${s.over1Ms} |\n`)
    }
    process.stdout.write(`| sum of the stages' medians (spans — hand-offs whole, worker rows — excluded) | ${f2(total)} | | | | |\n`)
  }
  if (tail !== undefined) {
    // The slowest calls as the server saw them (its first mark to its last), stage by stage: the
    // client's latency adds the sockets and the client itself, so compare the two p99s first.
    process.stdout.write(
      `\nThe slowest 1% of the calls in the server: ${tail.n} (first mark to last: p50 ${f2(tail.wholeP50Ms)}, p99 ${f2(tail.wholeP99Ms)} ms; ` +
        `the client saw p50 ${f2(latency.p50)}, p99 ${f2(latency.p99)}). Those calls took ${f2(tail.excessMs)} ms over the median on average; ` +
        `each stage's share, as its mean excess over its own median (stages above 0.05 ms; "(in worker)" rows and hand-offs lie inside others):\n\n`
    )
    process.stdout.write("| stage | mean excess ms |\n| --- | ---: |\n")
    for (const s of tail.stages) if (s.excessMs > 0.05) process.stdout.write(`| ${s.stage}${s.span ? " (span)" : ""} | ${f2(s.excessMs)} |\n`)
  }
} finally {
  await target.stop()
  await mock.stop()
}
