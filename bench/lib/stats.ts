/** Exact percentiles over all samples (no histogram buckets) and medians across rounds. */

export interface Summary {
  readonly n: number
  readonly mean: number
  readonly p50: number
  readonly p90: number
  readonly p99: number
  readonly max: number
}

/** Nearest-rank percentile of an ascending array. */
export const rank = (sorted: Float64Array, q: number): number =>
  sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!

export const summarize = (samples: Float64Array): Summary => {
  const sorted = Float64Array.from(samples).sort()
  let sum = 0
  for (const v of sorted) sum += v
  return {
    n: sorted.length,
    mean: sorted.length === 0 ? NaN : sum / sorted.length,
    p50: rank(sorted, 0.5),
    p90: rank(sorted, 0.9),
    p99: rank(sorted, 0.99),
    max: sorted.length === 0 ? NaN : sorted[sorted.length - 1]!
  }
}

export const median = (xs: ReadonlyArray<number>): number => {
  const v = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b)
  if (v.length === 0) return NaN
  const m = v.length >> 1
  return v.length % 2 === 1 ? v[m]! : (v[m - 1]! + v[m]!) / 2
}

export const spread = (xs: ReadonlyArray<number>): [number, number] => {
  const v = xs.filter((x) => Number.isFinite(x))
  return v.length === 0 ? [NaN, NaN] : [Math.min(...v), Math.max(...v)]
}

// ---- Report formatting (a figure that was not measured prints as "–") ----

export const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : "–")
export const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : "–")
export const f0 = (x: number) => (Number.isFinite(x) ? Math.round(x).toLocaleString("en-US") : "–")
export const signed = (x: number, f = f2) => (Number.isFinite(x) ? (x >= 0 ? "+" : "") + f(x) : "–")
