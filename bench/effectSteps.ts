/**
 * `npx tsx bench/effectSteps.ts [--dir DIR] [--calls N] [--warmup N]`: how many Effect fiber steps a
 * non-streamed governed call costs (docs/decisions/0027). Tollgate (bench/targets/tollgate.ts of DIR,
 * from sources, a file store) runs behind the bench mock with bench/lib/countEffectSteps.mjs preloaded;
 * this process sends sequential calls, each with its own idempotency key, and prints the steps per
 * call over the measured calls, by op. A count, not a timing: it is the same on a loaded box.
 */
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import { request } from "undici"
import { arg, numArg } from "./lib/args.ts"
import { signalForJson, startChild } from "./lib/procs.ts"

const here = dirname(fileURLToPath(import.meta.url))
const dir = resolve(arg("--dir") ?? resolve(here, ".."))
const calls = numArg("--calls", 400)
const warmup = numArg("--warmup", 200)
const model = "gpt-4o-mini"
const out = join(mkdtempSync(join(tmpdir(), "tollgate-effect-steps-")), "counts.json")

const mock = await startChild<{ port: number }>("mock", process.execPath, ["--import", "tsx", join(here, "targets/mock.ts"), "--delay", "2"], { cwd: dir })
const target = await startChild<{ port: number; key: string }>(
  "tollgate",
  process.execPath,
  ["--import", join(here, "lib/countEffectSteps.mjs"), "--import", "tsx", join(dir, "bench/targets/tollgate.ts"), "--upstream", `http://127.0.0.1:${mock.ready.port}`, "--model", model],
  { cwd: dir, env: { EFFECT_STEPS_ROOT: dir, EFFECT_STEPS_OUT: out }, timeoutMs: 60_000 }
)

const runId = Date.now().toString(36)
const call = async (n: number) => {
  const res = await request(`http://127.0.0.1:${target.ready.port}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${target.ready.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "Where is my order 48213-CX?" }], max_tokens: 400, metadata: { idempotency_key: `steps-${runId}-${n}` } })
  })
  await res.body.text()
  if (res.statusCode !== 200) throw new Error(`call ${n} answered ${res.statusCode}`)
}

/** The target's counts so far (its preload writes them on SIGUSR2). */
const counts = () => signalForJson<Record<string, number>>(target.pid, out)

try {
  for (let n = 0; n < warmup; n++) await call(n)
  const before = await counts()
  for (let n = 0; n < calls; n++) await call(warmup + n)
  const after = await counts()
  const perOp = Object.keys(after)
    .map((op) => [op, (after[op]! - (before[op] ?? 0)) / calls] as const)
    .filter(([, n]) => n > 0)
    .sort((a, b) => b[1] - a[1])
  const total = perOp.reduce((sum, [, n]) => sum + n, 0)
  process.stdout.write(`${dir}: ${total.toFixed(1)} Effect steps per governed call (${calls} sequential calls after ${warmup})\n`)
  for (const [op, n] of perOp) process.stdout.write(`  ${op.padEnd(20)} ${n.toFixed(2)}\n`)
} finally {
  await target.stop()
  await mock.stop()
}
