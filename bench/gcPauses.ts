/**
 * `npx tsx bench/gcPauses.ts [--targets tollgate,floor] [--rate 200] [--duration 15] [--rounds 2]`:
 * how much of the loaded tail is the garbage collector's. Each governed target runs bundled, as
 * `npm start` runs it (bench/lib/bundle.ts), with a preload that records its main thread's GC pauses
 * (bench/lib/gcObserver.mjs). An open-loop phase at `--rate` non-streamed calls a second (after a
 * warm-up) times every call; the report gives the latency percentiles, the GC pauses by kind (count,
 * total and longest, minor GCs per 1,000 calls: proportional to the bytes a call allocates), how
 * many of the calls at or above the p99 overlapped a pause of ≥ `--min-pause` ms (default 1), and
 * the share of all calls that did (what chance alone gives). Targets
 * alternate round by round. `--variant "FLAGS"` adds Tollgate once more with these node flags after
 * its start line's (an A/B of V8 flags in one run). A diagnosis, not a verdict: it never fails on speed.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { arg, numArg } from "./lib/args.ts"
import { bundleTarget, startFlags } from "./lib/bundle.ts"
import { openLoad } from "./lib/load.ts"
import { signalForJson, startChild } from "./lib/procs.ts"
import { f0, f1, f2, median } from "./lib/stats.ts"

const here = dirname(fileURLToPath(import.meta.url))
const root = resolve(here, "..")
const targets = (arg("--targets") ?? "tollgate,floor").split(",").filter((t) => t !== "")
const rate = numArg("--rate", 200)
const durationS = numArg("--duration", 15)
const rounds = numArg("--rounds", 2)
const minPause = numArg("--min-pause", 1)
const model = "gpt-4o-mini"
const scripts: Record<string, string> = { tollgate: "targets/tollgate.ts", floor: "targets/governedFloor.ts" }
for (const t of targets) if (scripts[t] === undefined) throw new Error(`unknown target ${t} (tollgate or floor)`)
const variant = arg("--variant")?.split(/\s+/).filter((f) => f !== "")
const runs = [...targets.map((name) => ({ name, script: scripts[name]!, flags: [] as ReadonlyArray<string> })), ...(variant === undefined ? [] : [{ name: `tollgate ${variant.join(" ")}`, script: scripts.tollgate!, flags: variant }])]

const prompt = "Summarise the delivery status of order 48213-CX for the customer in two sentences. ".repeat(8)
const body = (tag: string) => (n: number) =>
  JSON.stringify({ model, max_tokens: 400, messages: [{ role: "user", content: prompt }], metadata: { idempotency_key: `gc-${tag}-${n}` } })

type Pause = [startedAt: number, ms: number, kind: string]
interface Row {
  readonly target: string
  readonly calls: number
  readonly p50: number
  readonly p99: number
  readonly max: number
  readonly pauses: ReadonlyArray<Pause>
  readonly slow: number
  readonly slowInPause: number
  /** The share of all the phase's calls that overlapped a pause of ≥ --min-pause ms. */
  readonly anyInPause: number
}

const dir = mkdtempSync(join(tmpdir(), "tollgate-gc-"))
const mock = await startChild<{ port: number }>("mock", process.execPath, ["--import", "tsx", join(here, "targets/mock.ts"), "--delay", "20"], { cwd: root })
const upstream = `http://127.0.0.1:${mock.ready.port}`
const started = await Promise.all(
  runs.map(async ({ name, script, flags }, i) => {
    const gcFile = join(dir, `${i}.json`)
    const entry = bundleTarget(root, script, `gc-${i}`)
    const child = await startChild<{ port: number; key: string }>(
      name,
      process.execPath,
      [...startFlags(root), ...flags, "--import", join(here, "lib/gcObserver.mjs"), entry, "--upstream", upstream, "--model", model],
      { cwd: root, env: { TOLLGATE_BENCH_GC_FILE: gcFile }, timeoutMs: 60_000 }
    )
    const endpoint = { name, origin: `http://127.0.0.1:${child.ready.port}`, path: "/v1/chat/completions", headers: { authorization: `Bearer ${child.ready.key}` } }
    /** The pauses recorded since the last read (the target's preload writes them on SIGUSR2). */
    const readPauses = () => signalForJson<Array<Pause>>(child.pid, gcFile)
    return { name, child, endpoint, readPauses }
  })
)

const rows: Array<Row> = []
try {
  for (const t of started) await openLoad(t.endpoint, { rate: rate * 2, durationMs: 3_000, stream: false, body: body(`${t.name}-warm`) })
  for (let round = 1; round <= rounds; round++) {
    for (const t of round % 2 === 1 ? started : [...started].reverse()) {
      await t.readPauses()
      const calls: Array<[number, number]> = []
      const phaseStart = performance.timeOrigin + performance.now()
      const r = await openLoad(t.endpoint, { rate, durationMs: durationS * 1000, stream: false, body: body(`${t.name}-${round}`), onCall: (at, ms) => calls.push([at, ms]) })
      // The phase's pauses: from its first dispatch to its last answer (not the drain's idle after).
      const phaseEnd = Math.max(...calls.map(([at, ms]) => at + ms))
      const pauses = (await t.readPauses()).filter(([at, ms]) => at + ms >= phaseStart && at <= phaseEnd)
      const { p50, p99, max } = r.latencyMs
      const slow = calls.filter((c) => c[1] >= p99)
      const long = pauses.filter((p) => p[1] >= minPause)
      const inPause = ([at, ms]: [number, number]) => long.some(([ps, pms]) => ps < at + ms && ps + pms > at)
      const slowInPause = slow.filter(inPause).length
      // The chance rate: the share of all calls that overlapped such a pause, slow or not.
      const anyInPause = calls.filter(inPause).length / calls.length
      rows.push({ target: t.name, calls: r.ok, p50, p99, max, pauses, slow: slow.length, slowInPause, anyInPause })
      process.stderr.write(
        `round ${round} ${t.name}: ${r.ok} calls, p50 ${f2(p50)} p99 ${f2(p99)} ms, ${pauses.length} GC pauses, ` +
          `${slowInPause}/${slow.length} calls ≥ p99 in a pause ≥ ${minPause} ms (all calls: ${f1(anyInPause * 100)}%)\n`
      )
    }
  }
} finally {
  await Promise.allSettled([...started.map((t) => t.child.stop()), mock.stop()])
  rmSync(dir, { recursive: true, force: true })
}

const kindsOf = (ps: ReadonlyArray<Pause>) => [...new Set(ps.map((p) => p[2]))].sort()
const out = [
  `GC pauses of the main thread at ${rate} RPS open loop, ${durationS} s × ${rounds} round(s), mock upstream 20 ms. ` +
    "Medians over rounds, except: a pause kind's longest is the longest in any round, and the last two columns list every round " +
    "(calls at or above the round's p99 that overlapped a pause, and the share of all calls that did: the rate by chance).",
  "",
  `| target | calls | p50 ms | p99 ms | max ms | minor GCs / 1,000 calls | pauses by kind: count, total ms, longest ms | calls ≥ p99 in a pause ≥ ${minPause} ms | all calls in one |`,
  "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"
]
for (const { name } of runs) {
  const rs = rows.filter((r) => r.target === name)
  const all = rs.flatMap((r) => r.pauses)
  const byKind = kindsOf(all)
    .map((k) => {
      const per = rs.map((r) => r.pauses.filter((p) => p[2] === k))
      return `${k}: ${f0(median(per.map((ps) => ps.length)))}, ${f2(median(per.map((ps) => ps.reduce((s, p) => s + p[1], 0))))}, ${f2(Math.max(...per.flatMap((ps) => ps.map((p) => p[1]))))}`
    })
    .join("; ")
  out.push(
    `| ${name} | ${f0(median(rs.map((r) => r.calls)))} | ${f2(median(rs.map((r) => r.p50)))} | ${f2(median(rs.map((r) => r.p99)))} | ${f2(median(rs.map((r) => r.max)))} | ` +
      `${f2(median(rs.map((r) => (r.pauses.filter((p) => p[2] === "minor").length * 1000) / r.calls)))} | ${byKind || "none"} | ${rs.map((r) => `${r.slowInPause} / ${r.slow}`).join(", ")} | ${rs.map((r) => `${f1(r.anyInPause * 100)}%`).join(", ")} |`
  )
}
process.stdout.write(`\n${out.join("\n")}\n`)
