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

/**
 * Text without a single space, the tokenizer's worst case: one run of letters (its BPE merges within
 * one pre-split piece, and this whole text is one piece), words numbered so that no two stretches are
 * alike (no cache of pieces helps) and `salt` makes each text its own. 50 KB of it took 4.6 s to count
 * before the fix.
 */
export const noSpaceText = (chars: number, salt = 0): string => {
  const letters = (i: number) => {
    let s = ""
    do {
      s += String.fromCharCode(97 + (i % 26))
      i = Math.floor(i / 26)
    } while (i > 0)
    return s
  }
  const words: Array<string> = []
  let length = 0
  for (let i = 0; length < chars; i++) {
    const word = `tollgate${letters(i * 7 + salt)}`
    words.push(word)
    length += word.length
  }
  return words.join("").slice(0, chars)
}
