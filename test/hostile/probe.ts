/**
 * Measuring a blocked event loop during an attack: the loop's own delay (perf_hooks, in this process,
 * which is also the gateway's: tests run it in-process) and what a bystander sees — the latency of
 * GET /healthz polled while the attack runs.
 */
import { monitorEventLoopDelay } from "node:perf_hooks"

export interface LoopFigures {
  /** Wall time of the attack itself. */
  readonly elapsedMs: number
  /** The slowest /healthz answer while it ran (ms), and how many were polled. */
  readonly healthzMaxMs: number
  readonly healthzPolls: number
  /** The event loop's longest delay while it ran (ms), and its p99. */
  readonly loopMaxMs: number
  readonly loopP99Ms: number
}

export const duringAttack = async <A>(origin: string, attack: () => Promise<A>): Promise<{ readonly result: A; readonly figures: LoopFigures }> => {
  const loop = monitorEventLoopDelay({ resolution: 5 })
  loop.enable()
  let running = true
  const latencies: Array<number> = []
  const poll = (async () => {
    while (running) {
      const t0 = performance.now()
      const res = await fetch(`${origin}/healthz`)
      await res.arrayBuffer()
      latencies.push(performance.now() - t0)
      await new Promise((r) => setTimeout(r, 10))
    }
  })()
  const t0 = performance.now()
  try {
    const result = await attack()
    const elapsedMs = performance.now() - t0
    running = false
    await poll
    loop.disable()
    return {
      result,
      figures: {
        elapsedMs,
        healthzMaxMs: Math.max(0, ...latencies),
        healthzPolls: latencies.length,
        loopMaxMs: loop.max / 1e6,
        loopP99Ms: loop.percentile(99) / 1e6
      }
    }
  } finally {
    running = false
    loop.disable()
  }
}

export const fmt = (f: LoopFigures): string =>
  `answered in ${f.elapsedMs.toFixed(0)} ms; /healthz max ${f.healthzMaxMs.toFixed(1)} ms over ${f.healthzPolls} polls; event-loop delay max ${f.loopMaxMs.toFixed(1)} ms, p99 ${f.loopP99Ms.toFixed(1)} ms`

/** Text without a single space: pseudo-random letters and digits (a base64-like blob). */
export const noSpaceText = (chars: number): string => {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
  let out = ""
  let h = 2166136261
  for (let i = 0; i < chars; i++) {
    h = Math.imul(h ^ i, 16777619) >>> 0
    out += alphabet[h & 63]
  }
  return out
}
