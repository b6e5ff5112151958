/**
 * `TOLLGATE_TIMELINE=1`: a timeline of the governed call, for finding where the latency one caller
 * feels goes (bench/timeline.ts, issue 18). Each `mark(stage)` records the time since the previous
 * mark of the call under that stage's name; `span(stage, ms)` records a duration measured elsewhere
 * (the store worker's, inside a hand-off). Off (the default), every function is a no-op chosen once
 * at load: no clock read, no allocation on the hot path.
 *
 * For one caller at a time: the marks of calls that overlap would interleave. Times and stage names
 * only, never a request's content.
 */

export interface StageFigures {
  readonly stage: string
  /** Recorded by `span`: a duration inside other stages (the store worker's), not a step of the call's own sequence. */
  readonly span: boolean
  readonly n: number
  readonly p50Ms: number
  readonly p90Ms: number
  readonly p99Ms: number
  /** Samples more than 1 ms above this stage's own median: which stage the slow calls were slow in. */
  readonly over1Ms: number
}

/** Where the slowest calls' extra time went: each stage's excess over its own median, averaged over those calls. */
export interface TailFigures {
  /** The slowest 1% of the calls (at least one), by the whole call. */
  readonly n: number
  /** Of the whole call, begin to end, over every call: its median and p99. */
  readonly wholeP50Ms: number
  readonly wholeP99Ms: number
  /** Those calls' mean excess of the whole call over its median. */
  readonly excessMs: number
  /** Per stage (marks and spans), those calls' mean excess over the stage's own median, largest first. */
  readonly stages: ReadonlyArray<{ readonly stage: string; readonly span: boolean; readonly excessMs: number }>
}

export interface Timeline {
  readonly on: boolean
  /** A call starts (the fast path received its request). */
  readonly begin: () => void
  /** The stage that just ended: time since the previous mark. */
  readonly mark: (stage: string) => void
  /** A duration measured elsewhere (the store worker's share of a hand-off). */
  readonly span: (stage: string, ms: number) => void
  /** The call's last stage; marks after it are ignored until the next `begin`. */
  readonly end: (stage: string) => void
  /** Per stage, in the order stages were first seen: median, p90, p99 and the count of samples more than 1 ms above the median, over the calls since the last `reset`. */
  readonly report: () => ReadonlyArray<StageFigures>
  /** The slowest 1% of the calls since the last `reset` (first mark to last, in this process), stage by stage; undefined before a call ended. */
  readonly tail: () => TailFigures | undefined
  readonly reset: () => void
}

const quantile = (sorted: ReadonlyArray<number>, q: number): number =>
  sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!

const ascending = (xs: ReadonlyArray<number>): Array<number> => [...xs].sort((a, b) => a - b)

/** A recording timeline on `now` (performance.now in production; a test's own clock). */
export const makeTimeline = (now: () => number): Timeline => {
  const samples = new Map<string, { readonly span: boolean; readonly xs: Array<number> }>()
  // Each ended call: its whole time and its own stages' times (a stage marked twice in a call adds up).
  const calls: Array<{ readonly whole: number; readonly stages: Map<string, number> }> = []
  let current = new Map<string, number>()
  let began = 0
  let last = 0
  let open = false
  const push = (stage: string, ms: number, span: boolean) => {
    const s = samples.get(stage)
    if (s === undefined) samples.set(stage, { span, xs: [ms] })
    else s.xs.push(ms)
    current.set(stage, (current.get(stage) ?? 0) + ms)
  }
  const mark = (stage: string) => {
    if (!open) return
    const t = now()
    push(stage, t - last, false)
    last = t
  }
  return {
    on: true,
    begin: () => {
      open = true
      current = new Map()
      began = last = now()
    },
    mark,
    span: (stage, ms) => {
      if (open) push(stage, ms, true)
    },
    end: (stage) => {
      if (!open) return
      mark(stage)
      open = false
      calls.push({ whole: last - began, stages: current })
    },
    report: () =>
      Array.from(samples, ([stage, { span, xs }]) => {
        const sorted = ascending(xs)
        const p50Ms = quantile(sorted, 0.5)
        const over1Ms = sorted.filter((x) => x > p50Ms + 1).length
        return { stage, span, n: sorted.length, p50Ms, p90Ms: quantile(sorted, 0.9), p99Ms: quantile(sorted, 0.99), over1Ms }
      }),
    tail: () => {
      if (calls.length === 0) return undefined
      const wholes = ascending(calls.map((c) => c.whole))
      const wholeP50Ms = quantile(wholes, 0.5)
      const wholeP99Ms = quantile(wholes, 0.99)
      const slow = [...calls].sort((a, b) => b.whole - a.whole).slice(0, Math.ceil(calls.length / 100))
      // A stage a slow call did not reach counts as 0 ms, so its excess is minus its median.
      const stages = Array.from(samples, ([stage, { span, xs }]) => {
        const median = quantile(ascending(xs), 0.5)
        let excess = 0
        for (const c of slow) excess += (c.stages.get(stage) ?? 0) - median
        return { stage, span, excessMs: excess / slow.length }
      }).sort((a, b) => b.excessMs - a.excessMs)
      const excessMs = slow.reduce((sum, c) => sum + c.whole - wholeP50Ms, 0) / slow.length
      return { n: slow.length, wholeP50Ms, wholeP99Ms, excessMs, stages }
    },
    reset: () => {
      samples.clear()
      calls.length = 0
    }
  }
}

const noop = () => undefined
const off: Timeline = { on: false, begin: noop, mark: noop, span: noop, end: noop, report: () => [], tail: noop, reset: noop }

/** This process's timeline: recording when TOLLGATE_TIMELINE=1, otherwise no-ops. */
export const timeline: Timeline = process.env.TOLLGATE_TIMELINE === "1" ? makeTimeline(() => performance.now()) : off
