/**
 * The speed targets set for this benchmark (the issue that asked for it), judged on one run's
 * summary, for Tollgate and for the governed floor alike: the floor keeps every guarantee and drops
 * the pipeline, so a target the floor misses is out of reach for the guarantees themselves on this
 * machine, not only for Tollgate's code. A verdict is data in the report, never an exit code: the
 * benchmark does not fail on speed.
 */
import { signed } from "./stats.ts"

/** What a verdict needs of a target's summary row (bench/run.ts). */
export interface TargetFigures {
  readonly target: string
  readonly maxRps: number
  /** Median over rounds of the open phase at the headline rate. */
  readonly addedP50Ms: number
  readonly addedP99Ms: number
  /** What that phase achieved: below the offered rate, the target was saturated and the latency is a queue's. */
  readonly achievedRps: number
}

export interface Verdict {
  readonly target: string
  readonly check: string
  readonly value: string
  readonly met: boolean | undefined
}

export const LATENCY_P50_MS = 1
export const LATENCY_P99_MS = 5
export const SHARE_OF_BARE = 0.6

const ms = (x: number) => `${signed(x)} ms`
const judged = (x: number, ok: (x: number) => boolean): boolean | undefined => (Number.isFinite(x) ? ok(x) : undefined)

/**
 * The checks, for each governed target present (Tollgate, the floor): added p50 and p99 at the
 * headline rate, max RPS against the bare proxy's, and against Portkey's (max RPS, and added p50 at
 * the headline rate). A check whose reference target was not run is left out.
 */
export const judgeTargets = (
  rows: ReadonlyArray<TargetFigures>,
  headlineRate: number
): { readonly verdicts: ReadonlyArray<Verdict>; readonly saturated: ReadonlyArray<string> } => {
  const byName = new Map(rows.map((r) => [r.target, r]))
  const bare = byName.get("bare")
  const portkey = byName.get("portkey")
  const verdicts: Array<Verdict> = []
  for (const name of ["tollgate", "floor"]) {
    const t = byName.get(name)
    if (t === undefined) continue
    verdicts.push({ target: name, check: `added p50 @${headlineRate} RPS ≤ ${LATENCY_P50_MS} ms`, value: ms(t.addedP50Ms), met: judged(t.addedP50Ms, (x) => x <= LATENCY_P50_MS) })
    verdicts.push({ target: name, check: `added p99 @${headlineRate} RPS ≤ ${LATENCY_P99_MS} ms`, value: ms(t.addedP99Ms), met: judged(t.addedP99Ms, (x) => x <= LATENCY_P99_MS) })
    if (bare !== undefined) {
      const share = t.maxRps / bare.maxRps
      verdicts.push({ target: name, check: `max RPS ≥ ${SHARE_OF_BARE * 100}% of the bare proxy's`, value: `${(Math.floor(share * 1000) / 10).toFixed(1)}%`, met: judged(share, (x) => x >= SHARE_OF_BARE) })
    }
    if (portkey !== undefined) {
      const ratio = t.maxRps / portkey.maxRps
      verdicts.push({ target: name, check: "max RPS ≥ Portkey's", value: `${ratio.toFixed(1)}×`, met: judged(ratio, (x) => x >= 1) })
      verdicts.push({
        target: name,
        check: `added p50 @${headlineRate} RPS ≤ Portkey's`,
        value: `${ms(t.addedP50Ms)} vs ${ms(portkey.addedP50Ms)}`,
        met: judged(t.addedP50Ms - portkey.addedP50Ms, (x) => x <= 0)
      })
    }
  }
  // Under 95% of the offered rate, a target was saturated: its latency at that rate measures a backlog
  // (a target that keeps up still reads ≈ 98–99%, the phase's last requests finishing after its window).
  const saturated = rows.filter((r) => r.target !== "baseline" && r.achievedRps < 0.95 * headlineRate).map((r) => r.target)
  return { verdicts, saturated }
}
