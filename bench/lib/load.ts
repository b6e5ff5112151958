/**
 * Load generators.
 *
 * - `openLoad`: open model. Requests are dispatched on a fixed schedule (rate R, evenly spaced)
 *   whatever the target's latency, over an undici Pool with many connections, so a slow target
 *   builds a backlog instead of slowing the generator down (no coordinated omission by the client).
 *   Latency runs from the dispatch call to the last body byte; `ttfb` to the first body byte.
 *   How late the generator itself dispatched (its own event-loop lag) is reported as `lagP99Ms`.
 * - `callersLoad`: closed model at a few callers (1 for the one-caller phase), exact latencies.
 * - `closedLoad`: closed model with autocannon: N connections, each sends its next request when the
 *   previous answer arrives. Its throughput is the target's maximum at that concurrency.
 *
 * Every request body is unique (a counter in the idempotency key) so idempotency never replays.
 */
import autocannon from "autocannon"
import { Pool } from "undici"
import { summarize, type Summary } from "./stats.ts"

export interface TargetEndpoint {
  readonly name: string
  /** e.g. http://127.0.0.1:PORT */
  readonly origin: string
  readonly path: string
  readonly headers: Readonly<Record<string, string>>
}

export interface PhaseResult {
  readonly mode: "open" | "closed"
  readonly stream: boolean
  /** Requested rate (open) or connections (closed). */
  readonly rate?: number
  readonly connections?: number
  readonly durationS: number
  readonly sent: number
  readonly ok: number
  readonly errors: number
  readonly errorKinds: Record<string, number>
  /** Successful responses per second over the whole phase (including the drain of a backlog). */
  readonly achievedRps: number
  readonly latencyMs: Summary
  readonly ttfbMs?: Summary
  /** Generator's own dispatch lag (open model): a sanity check on the client, not the target. */
  readonly lagP99Ms?: number
}

export interface OpenOptions {
  readonly rate: number
  readonly durationMs: number
  readonly stream: boolean
  readonly body: (n: number) => string
  readonly timeoutMs?: number
  readonly connections?: number
  /** After the last dispatch, wait at most this long for answers; the rest count as errors ("unfinished"). */
  readonly drainMs?: number
  /**
   * Told of each successful call: when it was dispatched (ms since the epoch, `performance.timeOrigin`
   * based, so it lines up with another process's `performance` clock) and its latency in ms.
   */
  readonly onCall?: (startedAt: number, latencyMs: number) => void
}

const bump = (kinds: Record<string, number>, k: string) => {
  kinds[k] = (kinds[k] ?? 0) + 1
}

export const openLoad = async (t: TargetEndpoint, o: OpenOptions): Promise<PhaseResult> => {
  const timeoutMs = o.timeoutMs ?? 15_000
  const pool = new Pool(t.origin, {
    connections: o.connections ?? 512,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs
  })
  const headers = { ...t.headers, "content-type": "application/json" }
  const total = Math.max(1, Math.floor((o.rate * o.durationMs) / 1000))
  const interval = 1000 / o.rate
  const latency = new Float64Array(total)
  const ttfb = new Float64Array(total)
  const lag = new Float64Array(total)
  const kinds: Record<string, number> = {}
  let ok = 0
  let errors = 0
  let sent = 0
  let lastDone = 0
  let aborting = false
  const inflight = new Set<Promise<void>>()

  const fire = (n: number, intended: number) => {
    const t0 = performance.now()
    lag[n] = t0 - intended
    const p = pool
      .request({ method: "POST", path: t.path, headers, body: o.body(n) })
      .then(
        async (res) => {
          let first = -1
          try {
            for await (const _chunk of res.body) if (first < 0) first = performance.now()
          } catch (e) {
            lastDone = performance.now()
            errors++
            bump(kinds, aborting ? "unfinished" : ((e as { code?: string }).code ?? "body_error"))
            return
          }
          const t1 = performance.now()
          lastDone = t1
          if (res.statusCode === 200) {
            o.onCall?.(performance.timeOrigin + t0, t1 - t0)
            latency[ok] = t1 - t0
            ttfb[ok] = (first < 0 ? t1 : first) - t0
            ok++
          } else {
            errors++
            bump(kinds, `http_${res.statusCode}`)
          }
        },
        (err: { code?: string; message?: string }) => {
          lastDone = performance.now()
          errors++
          bump(kinds, aborting ? "unfinished" : (err.code ?? err.message ?? "error"))
        }
      )
      .finally(() => inflight.delete(p))
    inflight.add(p)
  }

  const start = performance.now()
  await new Promise<void>((resolve) => {
    const tick = () => {
      const due = Math.min(total, Math.floor((performance.now() - start) / interval) + 1)
      while (sent < due) {
        fire(sent, start + sent * interval)
        sent++
      }
      if (sent >= total) return resolve()
      setTimeout(tick, Math.max(0, start + sent * interval - performance.now()))
    }
    tick()
  })
  const sendEnd = performance.now()
  // A saturated target builds a backlog; bound the drain so one slow target cannot stall the run.
  const drained = await Promise.race([
    Promise.allSettled([...inflight]).then(() => true),
    new Promise<false>((r) => setTimeout(() => r(false), o.drainMs ?? 5_000).unref())
  ])
  if (!drained) {
    aborting = true
    await pool.destroy().catch(() => undefined)
    await Promise.allSettled([...inflight])
  } else {
    await pool.close()
  }
  const elapsedS = (Math.max(sendEnd, lastDone) - start) / 1000
  return {
    mode: "open",
    stream: o.stream,
    rate: o.rate,
    durationS: o.durationMs / 1000,
    sent,
    ok,
    errors,
    errorKinds: kinds,
    achievedRps: ok / elapsedS,
    latencyMs: summarize(latency.subarray(0, ok)),
    ...(o.stream ? { ttfbMs: summarize(ttfb.subarray(0, ok)) } : {}),
    lagP99Ms: summarize(lag.subarray(0, sent)).p99
  }
}

export interface ClosedOptions {
  readonly connections: number
  readonly durationMs: number
  /** The n-th request's body (autocannon's own `idReplacement` miscounts content-length, so a counter it is). */
  readonly body: (n: number) => string
  readonly timeoutS?: number
}

export const closedLoad = (t: TargetEndpoint, o: ClosedOptions): Promise<PhaseResult> =>
  new Promise((resolve, reject) => {
    let n = 0
    autocannon(
      {
        url: `${t.origin}${t.path}`,
        method: "POST",
        headers: { ...t.headers, "content-type": "application/json" },
        requests: [{ setupRequest: (req) => ({ ...req, body: o.body(n++) }) }],
        connections: o.connections,
        pipelining: 1,
        duration: o.durationMs / 1000,
        timeout: o.timeoutS ?? 15
      },
      (err: Error | null, r: autocannon.Result) => {
        if (err) return reject(err)
        const kinds: Record<string, number> = {}
        if (r.non2xx > 0) kinds.non_2xx = r.non2xx
        if (r.errors > 0) kinds.socket_errors = r.errors - r.timeouts
        if (r.timeouts > 0) kinds.timeouts = r.timeouts
        const ok = r["2xx"]
        const errors = r.non2xx + r.errors
        resolve({
          mode: "closed",
          stream: false,
          connections: o.connections,
          durationS: r.duration,
          sent: ok + errors,
          ok,
          errors,
          errorKinds: kinds,
          achievedRps: ok / r.duration,
          latencyMs: {
            n: ok,
            mean: r.latency.average,
            p50: r.latency.p50,
            p90: r.latency.p90,
            p99: r.latency.p99,
            max: r.latency.max
          }
        })
      }
    )
  })

export interface CallersOptions {
  /** Callers, each with one request in flight on its own connection: 1 is the one-caller phase. */
  readonly callers: number
  readonly durationMs: number
  readonly stream: boolean
  readonly body: (n: number) => string
  readonly timeoutMs?: number
  /** Caller i's own headers over the target's (e.g. its project's key: the 8-projects phase spreads callers over projects). */
  readonly headersFor?: (caller: number) => Readonly<Record<string, string>>
}

/**
 * Closed model with exact latencies (performance.now, 0.01 ms resolution, no histogram buckets): N
 * callers, each sending its next request when the previous answer's last byte arrived. `callers: 1`
 * is a user on a gateway that is not saturated: sequential calls, one in flight. autocannon's
 * histogram reads whole milliseconds, too coarse for a 1 ms target, so these phases do not use it.
 */
export const callersLoad = async (t: TargetEndpoint, o: CallersOptions): Promise<PhaseResult> => {
  const timeoutMs = o.timeoutMs ?? 15_000
  const pool = new Pool(t.origin, { connections: o.callers, pipelining: 1, keepAliveTimeout: 30_000, headersTimeout: timeoutMs, bodyTimeout: timeoutMs })
  // Callers with their own headers (a key each) get a connection each, so a connection carries one key (a splice with key affinity routes by it).
  const own = o.headersFor === undefined ? undefined : Array.from({ length: o.callers }, () => new Pool(t.origin, { connections: 1, pipelining: 1, keepAliveTimeout: 30_000, headersTimeout: timeoutMs, bodyTimeout: timeoutMs }))
  const headers = { ...t.headers, "content-type": "application/json" }
  const latency: Array<number> = []
  const ttfb: Array<number> = []
  const kinds: Record<string, number> = {}
  let errors = 0
  let n = 0
  const start = performance.now()
  const end = start + o.durationMs
  const caller = async (_: unknown, i: number) => {
    const mine = o.headersFor === undefined ? headers : { ...headers, ...o.headersFor(i) }
    const via = own?.[i] ?? pool
    while (performance.now() < end) {
      const body = o.body(n++)
      const t0 = performance.now()
      try {
        const res = await via.request({ method: "POST", path: t.path, headers: mine, body })
        let first = -1
        for await (const _chunk of res.body) if (first < 0) first = performance.now()
        const t1 = performance.now()
        if (res.statusCode === 200) {
          latency.push(t1 - t0)
          ttfb.push((first < 0 ? t1 : first) - t0)
        } else {
          errors++
          bump(kinds, `http_${res.statusCode}`)
        }
      } catch (e) {
        errors++
        bump(kinds, (e as { code?: string }).code ?? "error")
      }
    }
  }
  await Promise.all(Array.from({ length: o.callers }, caller))
  const elapsedS = (performance.now() - start) / 1000
  await Promise.all([pool, ...(own ?? [])].map((p) => p.close()))
  return {
    mode: "closed",
    stream: o.stream,
    connections: o.callers,
    durationS: o.durationMs / 1000,
    sent: latency.length + errors,
    ok: latency.length,
    errors,
    errorKinds: kinds,
    achievedRps: latency.length / elapsedS,
    latencyMs: summarize(Float64Array.from(latency)),
    ...(o.stream ? { ttfbMs: summarize(Float64Array.from(ttfb)) } : {})
  }
}
