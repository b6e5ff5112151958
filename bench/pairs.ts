/**
 * `npx tsx bench/pairs.ts --compare DIR [--calls N] [--delay MS] [--non-stream]`: one caller's stream
 * time to first byte (or, with `--non-stream`, a non-streamed call's whole latency), this tree against
 * another checkout, paired call by call.
 *
 * `npm run bench` interleaves its targets phase by phase (seconds apart), so a change of 0.1–0.2 ms
 * in a one-caller p50 drowns in the box's drift (docs/decisions/0023: an A/A difference of ≈ 1 ms).
 * Here both Tollgates (bundled and started as `npm start` runs them, bench/lib/bundle.ts) and the
 * mock upstream run side by side, and each round sends one stream to this tree, one to the other
 * (alternating which goes first) and one straight to the mock: the paired differences cancel the
 * drift, and their median resolves a fraction of a millisecond. Streams as the bench sends them
 * (an idempotency key each, usage included); the time to first byte is from the request's dispatch
 * to the first body chunk, a whole call's latency to its last, as `npm run bench` reads them
 * (bench/lib/load.ts). A benchmark: it prints, it asserts nothing.
 */
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { Pool } from "undici"
import { arg, flag, numArg } from "./lib/args.ts"
import { bundleTarget, startFlags } from "./lib/bundle.ts"
import { startChild } from "./lib/procs.ts"
import { median, rank } from "./lib/stats.ts"

const here = dirname(fileURLToPath(import.meta.url))
const root = resolve(here, "..")
const compare = arg("--compare")
if (compare === undefined) throw new Error("--compare DIR: the checkout to pair this tree with (e.g. a git worktree of the commit before a change)")
const other = resolve(compare)
const calls = numArg("--calls", 1000)
const delayMs = numArg("--delay", 20)
const stream = !flag("--non-stream")
const what = stream ? "stream TTFB" : "non-streamed latency"
const model = "gpt-4o-mini"

interface Target {
  readonly pool: Pool
  readonly headers: Record<string, string>
}

const mock = await startChild<{ port: number }>("mock", process.execPath, ["--import", "tsx", join(here, "targets/mock.ts"), "--delay", String(delayMs)], { cwd: root })
const upstream = `http://127.0.0.1:${mock.ready.port}`
const children = [mock]
const stopAll = async () => void (await Promise.allSettled(children.map((c) => c.stop())))
process.once("SIGINT", () => void stopAll().then(() => process.exit(130)))

const tollgate = async (dir: string, name: string): Promise<Target> => {
  const child = await startChild<{ port: number; key: string }>(
    name,
    process.execPath,
    [...startFlags(dir), bundleTarget(dir, "targets/tollgate.ts", name), "--upstream", upstream, "--model", model],
    { cwd: dir, timeoutMs: 60_000 }
  )
  children.push(child)
  return { pool: new Pool(`http://127.0.0.1:${child.ready.port}`, { connections: 1 }), headers: { authorization: `Bearer ${child.ready.key}`, "content-type": "application/json" } }
}

let n = 0
/** One call to its end; a stream's time to first byte, or a non-streamed call's latency, ms. */
const timed = async (t: Target): Promise<number> => {
  const body = JSON.stringify({
    model,
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    messages: [{ role: "user", content: `Where is my order 48213-CX? (${n})` }],
    max_tokens: 400,
    metadata: { idempotency_key: `pairs-${process.pid}-${n++}` }
  })
  const t0 = performance.now()
  const res = await t.pool.request({ method: "POST", path: "/v1/chat/completions", headers: t.headers, body })
  let first = -1
  for await (const _chunk of res.body) if (first < 0) first = performance.now()
  const last = performance.now()
  if (res.statusCode !== 200) throw new Error(`a call answered ${res.statusCode}`)
  return (stream ? first : last) - t0
}

try {
  const a = await tollgate(root, "pairs-this")
  const b = await tollgate(other, "pairs-other")
  const direct: Target = { pool: new Pool(upstream, { connections: 1 }), headers: { authorization: "Bearer sk-bench", "content-type": "application/json" } }
  for (let i = 0; i < 100; i++) await Promise.all([timed(a), timed(b)]).catch(() => undefined) // warm-up (JIT, pools, the store's first pages)
  const mine: Array<number> = []
  const theirs: Array<number> = []
  const mockOnly: Array<number> = []
  const diff: Array<number> = []
  for (let i = 0; i < calls; i++) {
    // Alternate which target goes first, so neither always follows the other's settlement.
    let x: number
    let y: number
    if (i % 2 === 0) {
      x = await timed(a)
      y = await timed(b)
    } else {
      y = await timed(b)
      x = await timed(a)
    }
    mine.push(x)
    theirs.push(y)
    diff.push(x - y)
    mockOnly.push(await timed(direct))
  }
  const sorted = [...diff].sort((p, q) => p - q)
  const q = (f: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * f))]!
  const f = (v: number) => v.toFixed(3)
  /** Each tree's own tail: the rounds are paired, but a p99 is a property of one side's calls. */
  const p99 = (xs: ReadonlyArray<number>) => rank(Float64Array.from(xs).sort(), 0.99)
  console.log(`\n${calls} rounds (one call to each Tollgate and one to the mock), mock ${delayMs} ms before headers, ${what} ms\n`)
  console.log("| this tree p50 / p99 | other p50 / p99 | mock alone p50 / p99 | this − other, paired: p25 / p50 / p75 | rounds this was faster |")
  console.log("| ---: | ---: | ---: | ---: | ---: |")
  console.log(
    `| ${f(median(mine))} / ${f(p99(mine))} | ${f(median(theirs))} / ${f(p99(theirs))} | ${f(median(mockOnly))} / ${f(p99(mockOnly))} | ${f(q(0.25))} / ${f(q(0.5))} / ${f(q(0.75))} | ${diff.filter((d) => d < 0).length} of ${calls} |`
  )
  await Promise.all([a.pool.close(), b.pool.close(), direct.pool.close()])
} finally {
  await stopAll()
}
