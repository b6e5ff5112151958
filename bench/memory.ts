/**
 * `npm run bench:memory`: how much memory `npm start` holds, at idle and at the saturated closed loop,
 * next to the governed floor's (bench/targets/governedFloor.ts) in the same run.
 *
 * Tollgate runs exactly as `npm start` runs it: src/main.ts bundled by scripts/build.mjs (with its
 * store worker beside it), started with `node` and the start script's flags, on a fresh SQLite
 * file, its default access log on (to a file), a gateway file routing to the bench's mock upstream
 * (20 ms). The floor is bundled the same way, as bench/run.ts starts it. For each target, one at a time: RSS after `--idle-s` seconds of idle, then
 * `--connections` (512) autocannon connections for `--seconds` (10) of non-streamed governed calls,
 * each with its own idempotency key, and the peak RSS the kernel recorded for the process (VmHWM, all
 * its threads). A benchmark: its figures are printed, never asserted.
 *
 *   npm run bench:memory -- [--targets tollgate,floor] [--seconds 10] [--connections 512] [--idle-s 5]
 *                           [--node-flags "--max-semi-space-size=4;"]  (extra runs of Tollgate with these flag sets
 *                                                                       instead of `npm start`'s, `;` between sets)
 *                           [--env K=V,K=V]                            (an extra run of Tollgate with them)
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { basename, join, resolve } from "node:path"
import { arg, numArg } from "./lib/args.ts"
import { closedLoad } from "./lib/load.ts"
import { sampleProc, startChild } from "./lib/procs.ts"

const here = import.meta.dirname
const root = resolve(here, "..")
const seconds = numArg("--seconds", 10)
const connections = numArg("--connections", 512)
const idleS = numArg("--idle-s", 5)
const targets = (arg("--targets") ?? "tollgate,floor").split(",")
/** Each `;`-separated set is an extra run of Tollgate with those Node flags instead of `npm start`'s. */
const flagSets = arg("--node-flags")?.split(";").map((set) => set.split(" ").filter((f) => f !== ""))
/** The Node flags `npm start` passes (package.json's start script), so this runs what it runs. */
const startFlags = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts: { start: string } }).scripts.start
  .split(" ")
  .filter((w) => w.startsWith("--"))
const extraEnv = arg("--env")
const model = "gpt-4o-mini"

const work = mkdtempSync(join(root, ".tollgate", "bench-memory-"))
const stops: Array<() => Promise<void>> = []
const log = (s: string) => process.stderr.write(`${s}\n`)
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** scripts/build.mjs, as `prestart` runs it: `entry` → `outdir` (with the store worker and the tokenizer's ranks beside it). */
const bundle = (entry: string, outdir: string): string => {
  execFileSync(process.execPath, [join(root, "scripts/build.mjs"), entry, outdir], { stdio: "inherit" })
  return join(outdir, basename(entry).replace(/\.ts$/, ".mjs"))
}

const body = (n: number) =>
  JSON.stringify({
    model,
    messages: [
      { role: "system", content: "You are a concise support assistant for an online shoe shop. Answer in two sentences." },
      { role: "user", content: "Where is my order 48213-CX? The tracking page has said 'label created' since Monday." }
    ],
    max_tokens: 200,
    metadata: { idempotency_key: `mem-${process.pid}-${n}` }
  })

interface Started {
  readonly pid: number
  readonly origin: string
  readonly key: string
  readonly stop: () => Promise<void>
}

/** `npm start`'s bundle, started as a user would, ready once its banner shows the base URL and the development key. */
const startTollgate = async (name: string, upstream: string, flags: ReadonlyArray<string>, env: Record<string, string>): Promise<Started> => {
  const dir = join(work, name)
  mkdirSync(dir, { recursive: true })
  const file = bundle(join(root, "src/main.ts"), join(dir, "dist"))
  const gateway = join(dir, "gateway.json")
  writeFileSync(
    gateway,
    JSON.stringify({
      providers: { mock: { type: "openai", base_url: `${upstream}/v1` } },
      routes: [{ name: model, provider: "mock", upstream_model: model, max_output_tokens: 4096, auto: true }],
      rate_cards: [{ version: "rc_2020-01", effective_from: "2020-01-01T00:00:00Z", prices: { [model]: { input: 150, cached_input: 75, output: 600 } } }],
      default_project: { budget_credits: 1_000_000_000_000_000, requests_per_minute: 60_000_000, burst: 1_000_000 }
    })
  )
  const { TOLLGATE_CONFIG: _c, TOLLGATE_ADMIN_TOKEN: _a, DATABASE_URL: _d, ...inherited } = process.env
  // Its stdout (the banner, then the access log) goes to a file, as `npm start > log` would: a pipe
  // read by this process, busy with the load, would hold the server's synchronous writes.
  const stdout = join(dir, "stdout.log")
  const child: ChildProcess = spawn(process.execPath, [...flags, file], {
    cwd: root,
    env: { ...inherited, PORT: "0", HOST: "127.0.0.1", DATABASE_URL: `sqlite:${join(dir, "t.db")}`, TOLLGATE_CONFIG: gateway, ...env },
    stdio: ["ignore", openSync(stdout, "w"), "pipe"]
  })
  let err = ""
  child.stderr!.on("data", (c: Buffer) => (err = (err + c.toString()).slice(-4000)))
  let exited = false
  child.once("exit", () => (exited = true))
  const ready = await (async () => {
    for (const until = Date.now() + 60_000; Date.now() < until && !exited; await sleep(100)) {
      const banner = readFileSync(stdout, "utf8")
      const url = /OpenAI base URL: (\S+?)\/v1\)/.exec(banner)
      const key = /development key: (\S+)/.exec(banner)
      if (url && key) return { origin: url[1]!, key: key[1]! }
    }
    throw new Error(`${name}: ${exited ? "exited" : "no banner in 60 s"}\n${err}`)
  })()
  const stop = () =>
    new Promise<void>((done) => {
      if (child.exitCode !== null || child.signalCode !== null) return done()
      child.once("exit", () => done())
      child.kill("SIGTERM")
    })
  return { pid: child.pid!, ...ready, stop }
}

/** The governed floor, bundled with the store worker as bench/run.ts starts it. */
const startFloor = async (upstream: string): Promise<Started> => {
  const dir = join(work, "floor")
  const file = bundle(join(root, "bench/targets/governedFloor.ts"), join(dir, "dist"))
  const child = await startChild<{ port: number; key: string }>(
    "floor",
    process.execPath,
    [file, "--upstream", upstream, "--model", model],
    { cwd: root, timeoutMs: 60_000 }
  )
  return { pid: child.pid, origin: `http://127.0.0.1:${child.ready.port}`, key: child.ready.key, stop: child.stop }
}

interface Row {
  readonly target: string
  readonly idleMb: number
  readonly peakMb: number
  readonly rps: number
  readonly cpuUsPerCall: number
  readonly errors: number
  readonly errorKinds: Record<string, number>
}

const measure = async (target: string, start: () => Promise<Started>): Promise<Row> => {
  const t = await start()
  stops.push(t.stop)
  await sleep(idleS * 1000)
  const idleMb = sampleProc(t.pid).rssMb
  log(`${target}: idle ${idleMb.toFixed(0)} MB; ${connections} connections for ${seconds} s …`)
  const endpoint = { name: target, origin: t.origin, path: "/v1/chat/completions", headers: { authorization: `Bearer ${t.key}` } }
  const before = sampleProc(t.pid)
  const r = await closedLoad(endpoint, { connections, durationMs: seconds * 1000, body })
  const after = sampleProc(t.pid)
  await t.stop()
  return { target, idleMb, peakMb: after.peakRssMb, rps: r.achievedRps, cpuUsPerCall: ((after.cpuMs - before.cpuMs) * 1000) / Math.max(1, r.ok), errors: r.errors, errorKinds: r.errorKinds }
}

const main = async () => {
  const mock = await startChild<{ port: number }>("mock", process.execPath, ["--import", "tsx", join(here, "targets/mock.ts"), "--delay", "20"], { cwd: root })
  stops.push(mock.stop)
  const upstream = `http://127.0.0.1:${mock.ready.port}`
  const envPairs = Object.fromEntries((extraEnv ?? "").split(",").filter((p) => p.includes("=")).map((p) => [p.slice(0, p.indexOf("=")), p.slice(p.indexOf("=") + 1)]))
  const runs: Array<[string, () => Promise<Started>]> = []
  for (const t of targets) {
    if (t === "tollgate") runs.push([["tollgate", ...startFlags].join(" "), () => startTollgate("tollgate", upstream, startFlags, {})])
    else if (t === "floor") runs.push(["floor", () => startFloor(upstream)])
    else throw new Error(`unknown target ${t} (tollgate, floor)`)
  }
  for (const [i, flags] of (flagSets ?? []).entries()) runs.push([["tollgate", ...flags].join(" "), () => startTollgate(`tollgate-flags-${i}`, upstream, flags, {})])
  if (extraEnv !== undefined) runs.push([`tollgate ${extraEnv}`, () => startTollgate("tollgate-env", upstream, startFlags, envPairs)])
  const rows: Array<Row> = []
  for (const [name, start] of runs) rows.push(await measure(name, start))
  const mockMb = sampleProc(mock.pid).peakRssMb
  console.log(`\nRSS of each target's process (all its threads), ${connections} connections × ${seconds} s, non-streamed, mock upstream 20 ms:\n`)
  console.log("| target | idle RSS | peak RSS (VmHWM) | closed-loop RPS | CPU µs / call | errors |")
  console.log("|---|---:|---:|---:|---:|---:|")
  for (const r of rows) console.log(`| ${r.target} | ${r.idleMb.toFixed(0)} MB | ${r.peakMb.toFixed(0)} MB | ${r.rps.toFixed(0)} | ${r.cpuUsPerCall.toFixed(0)} | ${r.errors}${r.errors > 0 ? ` ${JSON.stringify(r.errorKinds)}` : ""} |`)
  console.log(`\n(mock upstream peak ${mockMb.toFixed(0)} MB; figures from /proc/PID/status, on a shared box: compare rows of one run)`)
}

try {
  await main()
} finally {
  await Promise.allSettled(stops.splice(0).map((s) => s()))
  rmSync(work, { recursive: true, force: true })
}
