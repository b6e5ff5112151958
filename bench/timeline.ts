/**
 * `npx tsx bench/timeline.ts [--calls N] [--warmup N] [--delay MS] [--stream]`: where the latency of
 * ONE governed call goes (issue 18). Tollgate (bench/targets/tollgate.ts, from sources, a file store)
 * runs with TOLLGATE_TIMELINE=1 in front of the bench mock; this process sends sequential calls, one
 * in flight, each with its own idempotency key, and prints the median and p90 of every stage the
 * call's marks name (src/domain/timeline.ts) over the measured calls. Stages marked "(in worker)" are
 * the store worker's share of the round trip before them, not extra time.
 *
 * The figures are wall time on a shared machine: compare a before and an after run back to back.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { request } from "undici"
import type { StageFigures } from "../src/domain/timeline.ts"
import { flag, numArg } from "./lib/args.ts"
import { startChild } from "./lib/procs.ts"
import { f2 } from "./lib/stats.ts"

const here = dirname(fileURLToPath(import.meta.url))
const root = resolve(here, "..")
const calls = numArg("--calls", 300)
const warmup = numArg("--warmup", 100)
const stream = flag("--stream")
const model = "gpt-4o-mini"
const out = join(mkdtempSync(join(tmpdir(), "tollgate-timeline-")), "timeline.json")

const mock = await startChild<{ port: number }>("mock", process.execPath, ["--import", "tsx", join(here, "targets/mock.ts"), "--delay", String(numArg("--delay", 20))], { cwd: root })
const target = await startChild<{ port: number; key: string }>(
  "tollgate",
  process.execPath,
  ["--import", "tsx", join(here, "targets/tollgate.ts"), "--upstream", `http://127.0.0.1:${mock.ready.port}`, "--model", model, "--timeline", out],
  { cwd: root, env: { TOLLGATE_TIMELINE: "1" }, timeoutMs: 60_000 }
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

/** Ask the target for its figures since the last ask (SIGUSR1), and wait for the file. */
const collect = async (): Promise<ReadonlyArray<StageFigures>> => {
  rmSync(out, { force: true })
  process.kill(target.pid, "SIGUSR1")
  for (let waited = 0; waited < 10_000; waited += 50) {
    await new Promise((r) => setTimeout(r, 50))
    if (existsSync(out)) return JSON.parse(readFileSync(out, "utf8")) as ReadonlyArray<StageFigures>
  }
  throw new Error("the target wrote no timeline")
}

try {
  for (let n = 0; n < warmup; n++) await call(n)
  await collect()
  for (let n = 0; n < calls; n++) await call(warmup + n)
  const figures = await collect()
  process.stdout.write(`\nOne governed call, ${stream ? "streamed" : "non-streamed"}: ${calls} sequential calls after ${warmup} warm-up, ms (TOLLGATE_TIMELINE=1)\n\n`)
  process.stdout.write("| stage | p50 ms | p90 ms | calls |\n| --- | ---: | ---: | ---: |\n")
  let total = 0
  for (const s of figures) {
    if (!s.stage.includes("(in worker)")) total += s.p50Ms
    process.stdout.write(`| ${s.stage} | ${f2(s.p50Ms)} | ${f2(s.p90Ms)} | ${s.n} |\n`)
  }
  process.stdout.write(`| sum of the stages' medians (worker rows excluded) | ${f2(total)} | | |\n`)
} finally {
  await target.stop()
  await mock.stop()
}
