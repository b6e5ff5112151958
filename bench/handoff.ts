/**
 * `TOLLGATE_TIMELINE=1 npx tsx bench/handoff.ts [--compare DIR] [--calls N] [--gap MS]`: the store
 * worker's hand-off alone, A/B in one process (docs/decisions/0023). Two store workers on one file —
 * this checkout's and DIR's (default: this one) — take turns answering the same call (the recovery
 * sweep over no expired hold: a BEGIN, one SELECT, a COMMIT), one in flight, `--gap` ms apart so each
 * finds its worker asleep, as one caller's do. Printed per worker: the round trip from before
 * posting to the reply's arrival, the posting itself, and the round trip less the worker's own time
 * (its replies' timing, TOLLGATE_TIMELINE=1): the two thread hops, without the fsync's noise.
 */
import { Layer, ManagedRuntime, Option, Redacted } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { Worker } from "node:worker_threads"
import { makeSettings, Settings } from "../src/domain/config.ts"
import { ServicesLive } from "../src/server.ts"
import { ReceiptSigner } from "../src/services/ReceiptSigner.ts"
import { sodiumModule } from "../src/store/sodium.ts"
import type { FromWorker, ToWorker, WorkerTiming } from "../src/store/storeWorker.ts"
import { arg, numArg } from "./lib/args.ts"
import { f0, rank } from "./lib/stats.ts"

if (process.env.TOLLGATE_TIMELINE !== "1") throw new Error("run with TOLLGATE_TIMELINE=1: the workers' replies carry their timing only then")
const calls = numArg("--calls", 600)
const gapMs = numArg("--gap", 5)
const dbPath = join(mkdtempSync(join(tmpdir(), "tollgate-handoff-")), "tollgate.db")
const settings = makeSettings({ databaseUrl: `sqlite:${dbPath}`, adminToken: Option.some(Redacted.make("bench-admin-token")), storeWorker: false })
const runtime = ManagedRuntime.make(ServicesLive.pipe(Layer.provide(Layer.succeed(Settings, settings)), Layer.provide(Layer.setTracerEnabled(false))))
const signer = await runtime.runPromise(ReceiptSigner)

interface Side {
  readonly name: string
  readonly call: () => Promise<{ roundTrip: number; post: number; hops: number }>
  readonly close: () => void
}

const start = async (name: string, dir: string): Promise<Side> => {
  const worker = new Worker(new URL(`file://${resolve(dir, "src/store/storeWorker.mjs")}`), {
    workerData: { filename: dbPath, signingKey: signer.signingKey, signingKeyId: signer.keyId, sodium: sodiumModule(), assertInvariants: false }
  })
  await new Promise((ok) => worker.once("message", ok))
  let answer: (timing: WorkerTiming) => void = () => undefined
  worker.on("message", (m: FromWorker) => {
    if (m._tag === "Done") answer(m.replies[0]!.timing!)
  })
  const post = (message: ToWorker) => worker.postMessage(message)
  let id = 0
  return {
    name,
    call: () =>
      new Promise((ok) => {
        const t0 = performance.now()
        let posted = t0
        answer = (timing) => {
          const roundTrip = performance.now() - t0
          ok({ roundTrip, post: posted - t0, hops: roundTrip - timing.wait - timing.body - timing.commit })
        }
        post({ _tag: "Run", calls: [{ id: id++, op: "expire", args: { now: 0, failure: { code: "expired", message: "bench" } } }] })
        posted = performance.now()
      }),
    close: () => post({ _tag: "Close" })
  }
}

const sides = [await start("this checkout", resolve(import.meta.dirname, "..")), await start(`--compare ${arg("--compare") ?? "."}`, arg("--compare") ?? resolve(import.meta.dirname, ".."))]
const figures = sides.map(() => ({ roundTrip: [] as Array<number>, post: [] as Array<number>, hops: [] as Array<number> }))
for (let n = 0; n < calls * 2; n++) {
  await new Promise((r) => setTimeout(r, gapMs))
  const i = n % 2
  const f = await sides[i]!.call()
  if (n >= 100) for (const k of ["roundTrip", "post", "hops"] as const) figures[i]![k].push(f[k])
}
/** The nearest-rank percentile of bench/lib/stats.ts, the other benches' rule, in µs. */
const pct = (xs: Array<number>, q: number) => rank(Float64Array.from(xs).sort(), q) * 1000
process.stdout.write(`\n${calls - 50} calls each, interleaved, ${gapMs} ms apart; µs p50 [p10, p90]\n\n| worker | round trip | posting | thread hops (round trip − worker's time) |\n| --- | ---: | ---: | ---: |\n`)
sides.forEach((side, i) => {
  const cell = (xs: Array<number>) => `${f0(pct(xs, 0.5))} [${f0(pct(xs, 0.1))}, ${f0(pct(xs, 0.9))}]`
  process.stdout.write(`| ${side.name} | ${cell(figures[i]!.roundTrip)} | ${cell(figures[i]!.post)} | ${cell(figures[i]!.hops)} |\n`)
})
for (const side of sides) side.close()
await runtime.dispose()
