/**
 * The speed targets of issue 18, judged on one run's own figures, for Tollgate and for the governed
 * floor alike (the floor keeps every guarantee and drops the pipeline: a target the floor misses is
 * out of reach for the guarantees on this machine, not only for Tollgate's code). Latency targets are
 * set against the bare proxy of the same run: "≤ bare + 1 ms" reads (target − baseline) − (bare −
 * baseline) ≤ 1 ms, medians over rounds. A verdict is data in the report, never an exit code: the
 * benchmark does not fail on speed.
 *
 * The latency checks are also judged for `bare-durable` when it ran: the bare proxy plus one synced
 * SQLite commit before each answer and nothing else (bench/targets/bareProxy.ts). It keeps the one
 * guarantee no design can drop, a charge on disk before the caller sees the answer, so a latency
 * target it misses is below the price of this machine's disk, whatever the gateway's code.
 *
 * Withdrawn (issue 18): ≥ 60% of the bare proxy's throughput, and +1 ms p50 at 1,000 RPS.
 */
import { f0, signed } from "./stats.ts"

/** Added latency of one phase, target − baseline of the same round, medians over rounds (ms). */
export interface Added {
  readonly p50: number
  readonly p99: number
}

/** What a verdict needs of a target's summary row (bench/run.ts). A phase not run is undefined. */
export interface TargetFigures {
  readonly target: string
  /** Sequential calls, one in flight: non-streamed latency, and a stream's time to first byte (p50 only is judged). */
  readonly oneCaller?: Added | undefined
  readonly oneCallerTtfb?: Added | undefined
  /** 16 callers, closed loop, 16 connections. */
  readonly callers16?: Added | undefined
  /** Open loop at 200 RPS. */
  readonly open200?: Added | undefined
  /** Throughput of the saturating closed loop. */
  readonly closedRps: number
  /** Target process CPU per successful call in the saturating closed loop, µs. */
  readonly cpuUsPerCall: number
  readonly idleRssMb: number
  readonly peakRssMb: number
}

export interface Verdict {
  readonly target: string
  readonly check: string
  readonly value: string
  /** undefined: not measured; "reported": a figure the targets ask to see, not a bound. */
  readonly met: boolean | undefined | "reported"
}

export const ONE_CALLER_P50_MS = 1
export const ONE_CALLER_P99_MS = 3
export const TTFB_P50_MS = 1
export const LOADED_P50_MS = 1.5
export const LOADED_P99_MS = 5
export const SHARE_OF_FLOOR = 0.9
export const IDLE_RSS_MB = 150
export const PEAK_RSS_MB = 300

const ms = (x: number) => `${signed(x)} ms`
const judged = (x: number, ok: (x: number) => boolean): boolean | undefined => (Number.isFinite(x) ? ok(x) : undefined)

/** The latency phases: how a check names each, where a row keeps it, its bounds over bare (a stream's first byte has no p99 bound). */
const PHASES: ReadonlyArray<{
  readonly label: string
  readonly pick: (r: TargetFigures) => Added | undefined
  readonly p50Bound: number
  readonly p99Bound: number | undefined
}> = [
  { label: "one caller", pick: (r) => r.oneCaller, p50Bound: ONE_CALLER_P50_MS, p99Bound: ONE_CALLER_P99_MS },
  { label: "one caller, stream TTFB", pick: (r) => r.oneCallerTtfb, p50Bound: TTFB_P50_MS, p99Bound: undefined },
  { label: "16 callers", pick: (r) => r.callers16, p50Bound: LOADED_P50_MS, p99Bound: LOADED_P99_MS },
  { label: "200 RPS", pick: (r) => r.open200, p50Bound: LOADED_P50_MS, p99Bound: LOADED_P99_MS }
]

/**
 * The checks, for each governed target present (Tollgate, the floor), and the latency checks for the
 * durable bare proxy. A latency check needs the bare proxy's same phase; the throughput share needs
 * both governed targets; a check whose reference or phase was not run is left out.
 */
export const judgeTargets = (rows: ReadonlyArray<TargetFigures>): ReadonlyArray<Verdict> => {
  const byName = new Map(rows.map((r) => [r.target, r]))
  const bare = byName.get("bare")
  const floor = byName.get("floor")
  const verdicts: Array<Verdict> = []
  const overBare = (name: string, { label, pick, p50Bound, p99Bound }: (typeof PHASES)[number]) => {
    const t = byName.get(name)
    const a = t === undefined ? undefined : pick(t)
    const b = bare === undefined ? undefined : pick(bare)
    if (a === undefined || b === undefined) return
    const p50 = a.p50 - b.p50
    verdicts.push({ target: name, check: `${label} added p50 ≤ bare + ${p50Bound} ms`, value: `${ms(p50)} over bare`, met: judged(p50, (x) => x <= p50Bound) })
    if (p99Bound === undefined) return
    const p99 = a.p99 - b.p99
    verdicts.push({ target: name, check: `${label} added p99 ≤ bare + ${p99Bound} ms`, value: `${ms(p99)} over bare`, met: judged(p99, (x) => x <= p99Bound) })
  }
  const latency = (name: string) => {
    for (const phase of PHASES) overBare(name, phase)
  }
  for (const name of ["tollgate", "floor"]) {
    const t = byName.get(name)
    if (t === undefined) continue
    latency(name)
    if (name === "tollgate" && floor !== undefined) {
      const share = t.closedRps / floor.closedRps
      verdicts.push({
        target: name,
        check: `closed-loop RPS ≥ ${SHARE_OF_FLOOR * 100}% of the governed floor's`,
        value: `${(Math.floor(share * 1000) / 10).toFixed(1)}%`,
        met: judged(share, (x) => x >= SHARE_OF_FLOOR)
      })
    }
    verdicts.push({ target: name, check: "CPU µs per call (closed loop)", value: `${f0(t.cpuUsPerCall)} µs`, met: Number.isFinite(t.cpuUsPerCall) ? "reported" : undefined })
    verdicts.push({ target: name, check: `RSS idle ≤ ${IDLE_RSS_MB} MB`, value: `${f0(t.idleRssMb)} MB`, met: judged(t.idleRssMb, (x) => x <= IDLE_RSS_MB) })
    verdicts.push({ target: name, check: `RSS peak ≤ ${PEAK_RSS_MB} MB`, value: `${f0(t.peakRssMb)} MB`, met: judged(t.peakRssMb, (x) => x <= PEAK_RSS_MB) })
  }
  // The disk's own price: latency only (its CPU, memory and throughput are not a gateway's).
  latency("bare-durable")
  return verdicts
}

/** A target's added p50 over a reference target of the same run, one phase. */
export interface OverReference {
  readonly target: string
  readonly phase: string
  readonly p50: number
}

/** Each of `targets`' p50 over `reference`'s, phase by phase; empty when the reference did not run, a phase either side did not run left out. */
const p50Over = (rows: ReadonlyArray<TargetFigures>, reference: string, targets: ReadonlyArray<string>): ReadonlyArray<OverReference> => {
  const byName = new Map(rows.map((r) => [r.target, r]))
  const ref = byName.get(reference)
  if (ref === undefined) return []
  return targets.flatMap((name) => {
    const t = byName.get(name)
    if (t === undefined) return []
    return PHASES.flatMap(({ label, pick }) => {
      const a = pick(t)
      const r = pick(ref)
      return a === undefined || r === undefined ? [] : [{ target: name, phase: label, p50: a.p50 - r.p50 }]
    })
  })
}

/**
 * Not a verdict: each governed target's p50 over `bare-durable` instead of `bare`, the disk's price
 * taken out (docs/decisions/0040), so a reader sees what the gateway itself adds on this machine.
 */
export const overDurable = (rows: ReadonlyArray<TargetFigures>): ReadonlyArray<OverReference> => p50Over(rows, "bare-durable", ["tollgate", "floor"])

/**
 * Not a verdict: Tollgate's p50 over the governed floor's, what its pipeline adds to the guarantees'
 * own cost on this machine — the yardstick docs/decisions/0041 suggests for restated latency targets,
 * as the closed-loop target already is.
 */
export const overFloor = (rows: ReadonlyArray<TargetFigures>): ReadonlyArray<OverReference> => p50Over(rows, "floor", ["tollgate"])
