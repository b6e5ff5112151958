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
  readonly reset: () => void
}

const quantile = (sorted: ReadonlyArray<number>, q: number): number =>
  sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!

/** A recording timeline on `now` (performance.now in production; a test's own clock). */
export const makeTimeline = (now: () => number): Timeline => {
  const samples = new Map<string, { readonly span: boolean; readonly xs: Array<number> }>()
  let last = 0
  let open = false
  const push = (stage: string, ms: number, span: boolean) => {
    const s = samples.get(stage)
    if (s === undefined) samples.set(stage, { span, xs: [ms] })
    else s.xs.push(ms)
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
      last = now()
    },
    mark,
    span: (stage, ms) => {
      if (open) push(stage, ms, true)
    },
    end: (stage) => {
      mark(stage)
      open = false
    },
    report: () =>
      Array.from(samples, ([stage, { span, xs }]) => {
        const sorted = [...xs].sort((a, b) => a - b)
        const p50Ms = quantile(sorted, 0.5)
        const over1Ms = sorted.filter((x) => x > p50Ms + 1).length
        return { stage, span, n: sorted.length, p50Ms, p90Ms: quantile(sorted, 0.9), p99Ms: quantile(sorted, 0.99), over1Ms }
      }),
    reset: () => samples.clear()
  }
}

const noop = () => undefined
const off: Timeline = { on: false, begin: noop, mark: noop, span: noop, end: noop, report: () => [], reset: noop }

/** This process's timeline: recording when TOLLGATE_TIMELINE=1, otherwise no-ops. */
export const timeline: Timeline = process.env.TOLLGATE_TIMELINE === "1" ? makeTimeline(() => performance.now()) : off
