/**
 * `npm run bench -- --soak [--soak-seconds N] [--soak-rate R]`: a bounded soak of Tollgate (issue 19,
 * operations). The server runs bundled as `npm start` runs it, on loopback, against the mock upstream
 * (20 ms, streams of ~7 chunks 20 ms apart), at a fixed rate (open loop, default 50 calls/s) for
 * 10 minutes by default: a third of the calls are streams, and one in five repeats an earlier call's
 * idempotency key and body (a retry: it must replay). It reports, every 30 s and at the end:
 *
 * - RSS of the server process (and its peak), to see memory settle rather than grow;
 * - event-loop delay, as the round trip of GET /healthz probed every 200 ms (an upper bound: the
 *   loop's delay plus one tiny HTTP exchange on loopback);
 * - lost requests: calls never answered (connection cut, timeout) or answered 5xx, and replays that
 *   ran twice for one idempotency key.
 *
 * At the end it stops the server with SIGTERM and checks the store: nothing reserved or held,
 * `tollgate audit` clean.
 */
import { startMockUpstream } from "../test/support/mockUpstream.ts"
import { audit, buildServer, type CallSpec, callSpec, governedCall, newStore, spawnGateway, storeState } from "../test/crash/support.ts"
import { numArg } from "./lib/args.ts"
import { sampleProc } from "./lib/procs.ts"

const seconds = numArg("--soak-seconds", 600)
const rate = numArg("--soak-rate", 50)
const log = (line: string) => process.stdout.write(`[soak] ${line}\n`)

const percentile = (xs: ReadonlyArray<number>, p: number): number => {
  if (xs.length === 0) return 0
  const sorted = [...xs].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!
}

export const soak = async (): Promise<number> => {
  log(`${seconds} s at ${rate} calls/s on loopback (a third streams, a fifth idempotent retries)`)
  const server = await buildServer()
  const upstream = await startMockUpstream({ record: false, behavior: { delayMs: 20, chunkDelayMs: 20 } })
  const store = newStore(upstream.url)
  const proc = await spawnGateway(server.main, store, { TOLLGATE_HEARTBEAT_MS: "1000" })
  const key = proc.devKey!
  const pid = proc.child.pid!
  const counts = { sent: 0, ok: 0, replayed: 0, retries: 0, keysRunTwice: 0, cut: 0, status4xx: 0, status5xx: 0 }
  /** Per idempotency key, the answers that ran (were not replays): exactly one each. */
  const ran = new Map<string, number>()
  const healthMs: Array<number> = []
  const rss: Array<number> = []
  const latencies: Array<number> = []
  const past: Array<CallSpec> = []
  const inflight = new Set<Promise<void>>()
  const t0 = performance.now()
  let tick = 0

  const probe = setInterval(() => {
    const start = performance.now()
    fetch(`${proc.origin}/healthz`).then(
      async (r) => {
        await r.arrayBuffer()
        healthMs.push(performance.now() - start)
      },
      () => healthMs.push(Number.POSITIVE_INFINITY)
    )
  }, 200)
  const report = (label: string) => {
    const s = sampleProc(pid)
    rss.push(s.rssMb)
    log(
      `${label}: sent ${counts.sent}, answered 200 ${counts.ok} (replayed ${counts.replayed}), lost ${counts.cut + counts.status5xx + counts.keysRunTwice}; ` +
        `RSS ${s.rssMb.toFixed(0)} MB (peak ${s.peakRssMb.toFixed(0)}); /healthz p50 ${percentile(healthMs, 0.5).toFixed(1)} ms, p99 ${percentile(healthMs, 0.99).toFixed(1)} ms, max ${Math.max(0, ...healthMs.filter(Number.isFinite)).toFixed(1)} ms; ` +
        `call p50 ${percentile(latencies, 0.5).toFixed(1)} ms, p99 ${percentile(latencies, 0.99).toFixed(1)} ms`
    )
  }
  const every = setInterval(() => report(`${Math.round((performance.now() - t0) / 1000)} s`), 30_000)

  // Fixed rate: call i is due at t0 + i / rate, whatever the previous calls are doing.
  while (performance.now() - t0 < seconds * 1000) {
    const due = t0 + (tick * 1000) / rate
    const wait = due - performance.now()
    if (wait > 0) await new Promise((r) => setTimeout(r, wait))
    const retry = past.length > 0 && tick % 5 === 4
    const spec = retry ? past[Math.floor(Math.random() * past.length)]! : callSpec(`soak-${tick}`, tick % 3 === 0)
    if (!retry) {
      past.push(spec)
      if (past.length > 1000) past.shift()
    }
    tick++
    counts.sent++
    if (retry) counts.retries++
    const call = governedCall(proc.origin, key, spec).then((a) => {
      latencies.push(a.ms)
      if (latencies.length > 100_000) latencies.splice(0, 50_000)
      if (a.status === "cut") counts.cut++
      else if (a.status >= 500) counts.status5xx++
      else if (a.status >= 400) counts.status4xx++
      else {
        counts.ok++
        if (a.replayed) counts.replayed++
      }
      // Of the calls sharing a key (the first and its retries, in whatever order they reach the
      // gateway), exactly one runs; the others replay it.
      if (a.status === 200 && !a.replayed) {
        const n = (ran.get(spec.key) ?? 0) + 1
        ran.set(spec.key, n)
        if (n === 2) counts.keysRunTwice++
      }
    })
    inflight.add(call)
    void call.finally(() => inflight.delete(call))
  }
  await Promise.all(inflight)
  clearInterval(every)
  clearInterval(probe)
  report("end")
  proc.child.kill("SIGTERM")
  const exit = await proc.exited
  const state = storeState(store.dbPath)
  const audited = await audit(store.dbPath)
  const lost = counts.cut + counts.status5xx + counts.keysRunTwice
  const summary = {
    seconds,
    rate,
    ...counts,
    lost,
    rssMb: { first: rss[0] ?? NaN, last: rss.at(-1) ?? NaN, max: Math.max(...rss) },
    healthzMs: { p50: percentile(healthMs, 0.5), p99: percentile(healthMs, 0.99), max: Math.max(0, ...healthMs) },
    exitCode: exit.code,
    store: { reserved: state.reserved, held: state.held, pending: state.pending, doubleCharged: state.doubleCharged.length },
    auditClean: audited.summary.clean
  }
  log(JSON.stringify(summary))
  await upstream.close()
  server.dispose()
  store.dispose()
  const ok = lost === 0 && exit.code === 0 && state.reserved === 0 && state.held === 0 && audited.summary.clean && state.doubleCharged.length === 0
  log(ok ? "soak passed" : "soak FAILED")
  return ok ? 0 : 1
}
