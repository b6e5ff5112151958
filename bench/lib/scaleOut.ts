/**
 * Issue 40's targets for the scale-out store, judged on one run's own figures (bench/run.ts), side by
 * side with the SQLite target of the same run: PostgreSQL + Redis with one instance (`tollgate-pg`)
 * and two (`tollgate-pg2`) against Tollgate on SQLite (`tollgate`). As for issue 18's targets
 * (bench/lib/targets.ts) a verdict is data in the report, never an exit code.
 *
 * - one instance ≥ 50% of SQLite's calls/s at 16 callers on one hot project;
 * - its gateway CPU a call ≤ 2× SQLite's, in that same phase;
 * - calls/s at 512 connections ≥ 90% of the target's best phase on the hot project (no collapse),
 *   judged for each PostgreSQL target (SQLite's reported beside them);
 * - 2 instances ≥ 1 instance on 8 projects and on one hot project (the best phase of each), behind a
 *   round-robin balancer (`tollgate-pg2`) and, when it ran, routed by key (`tollgate-pg2a`, the
 *   deployment README recommends for a busy project: docs/decisions/0055) — judged on the ratio of the
 *   medians, with the ratios paired by round beside it (their median and spread: docs/decisions/0061);
 * - the store port alone (bench/pgHotProject.ts) ≥ 1,500 governed calls/s on one hot project;
 * - and, when `bare-lb` and `bare2` ran, the control: the instance checks for the bare Node proxy as 1
 *   and 2 processes behind the same balancer, which has no store at all (docs/decisions/0059).
 *
 * On a 2-core box that the generator, the mock, PostgreSQL, Redis and every instance share, these
 * figures are about what a call costs, not about how the instances scale (docs/decisions/0045).
 */
import { f0, f2, median } from "./stats.ts"

/** What the scale-out verdicts need of a target's row: each figure a median over rounds, NaN when its phase did not run. */
export interface ScaleFigures {
  readonly target: string
  /** 16 callers, one hot project (the default project): calls/s and gateway CPU µs a call. */
  readonly hot16Rps: number
  readonly hot16CpuUs: number
  /** The 8-projects phase (keys of 8 projects, calls spread over them): calls/s. */
  readonly projectsRps: number
  /** The closed loop at 512 connections on the hot project: calls/s (NaN when no phase ran at 512). */
  readonly at512Rps: number
  /** The best successful calls/s of any hot-project phase (16 callers, the curve, the saturating loop). */
  readonly bestHotRps: number
  /**
   * The same two figures round by round (index = round − 1, NaN where the phase did not run): the
   * 8-projects phase, and the phase `bestHotRps` is the median of. The bench runs each phase on every
   * target one after the other within a round, so a round's two targets met the same box — the
   * instance checks show their ratio paired by round beside the ratio of the medians.
   */
  readonly projectsRpsByRound?: ReadonlyArray<number>
  readonly bestHotRpsByRound?: ReadonlyArray<number>
}

/**
 * Round-paired ratios of `two` over `one` (rounds where both ran): their median, lowest and highest, and
 * how many. undefined under 2 pairs. What the box's drift between rounds does to a ratio of medians, the
 * pairs show: a spread that straddles 1× says the run cannot tell the two apart.
 */
export const pairedRatios = (
  two: ReadonlyArray<number> | undefined,
  one: ReadonlyArray<number> | undefined
): { readonly median: number; readonly min: number; readonly max: number; readonly n: number } | undefined => {
  if (two === undefined || one === undefined) return undefined
  const ratios = two.flatMap((x, i) => {
    const y = one[i]
    return y !== undefined && Number.isFinite(x) && Number.isFinite(y) && y > 0 ? [x / y] : []
  })
  if (ratios.length < 2) return undefined
  return { median: median(ratios), min: Math.min(...ratios), max: Math.max(...ratios), n: ratios.length }
}

/** `; paired by round: median 0.97× [0.90, 1.26] over 5 rounds` — or nothing under 2 paired rounds. */
const byRound = (two: ReadonlyArray<number> | undefined, one: ReadonlyArray<number> | undefined): string => {
  const p = pairedRatios(two, one)
  return p === undefined ? "" : `; paired by round: median ${f2(p.median)}× [${f2(p.min)}, ${f2(p.max)}] over ${p.n} rounds`
}

export interface ScaleVerdict {
  readonly check: string
  readonly value: string
  /** undefined: a figure it needs was not measured. */
  readonly met: boolean | undefined
  /** A control, not a target: the same check for a server with no store (docs/decisions/0059). */
  readonly control?: true
}

/** The control's targets: the bare proxy as 1 and as 2 processes behind the balancer (bench/run.ts). */
export const CONTROL_TARGETS = ["bare-lb", "bare2"] as const

export const PG_SHARE_OF_SQLITE = 0.5
export const PG_CPU_OVER_SQLITE = 2
export const NO_COLLAPSE_SHARE = 0.9
export const PORT_ALONE_CALLS_PER_S = 1500

const pct = (x: number) => `${(Math.floor(x * 1000) / 10).toFixed(1)}%`
const judged = (x: number, ok: (x: number) => boolean): boolean | undefined => (Number.isFinite(x) ? ok(x) : undefined)

/**
 * The checks whose targets ran: the share and CPU checks need `tollgate` and `tollgate-pg`, the
 * collapse check a PostgreSQL target with a phase at 512 connections, the instance checks both
 * PostgreSQL targets, the port-alone check its figure (`portAlone`, governed calls/s).
 */
export const judgeScaleOut = (rows: ReadonlyArray<ScaleFigures>, portAlone?: number): ReadonlyArray<ScaleVerdict> => {
  const byName = new Map(rows.map((r) => [r.target, r]))
  const sqlite = byName.get("tollgate")
  const pg1 = byName.get("tollgate-pg")
  const pg2 = byName.get("tollgate-pg2")
  const verdicts: Array<ScaleVerdict> = []
  if (sqlite !== undefined && pg1 !== undefined) {
    const share = pg1.hot16Rps / sqlite.hot16Rps
    verdicts.push({
      check: `PostgreSQL 1 instance ≥ ${PG_SHARE_OF_SQLITE * 100}% of SQLite's calls/s, 16 callers, one hot project`,
      value: `${f0(pg1.hot16Rps)} / ${f0(sqlite.hot16Rps)} = ${pct(share)}`,
      met: judged(share, (x) => x >= PG_SHARE_OF_SQLITE)
    })
    const cpu = pg1.hot16CpuUs / sqlite.hot16CpuUs
    verdicts.push({
      check: `PostgreSQL 1 instance gateway CPU a call ≤ ${PG_CPU_OVER_SQLITE}× SQLite's, same phase`,
      value: `${f0(pg1.hot16CpuUs)} / ${f0(sqlite.hot16CpuUs)} µs = ${f2(cpu)}×`,
      met: judged(cpu, (x) => x <= PG_CPU_OVER_SQLITE)
    })
  }
  for (const [name, label] of [
    ["tollgate-pg", "PostgreSQL 1 instance"],
    ["tollgate-pg2", "PostgreSQL 2 instances"]
  ] as const) {
    const t = byName.get(name)
    if (t === undefined || !Number.isFinite(t.at512Rps)) continue
    const share = t.at512Rps / t.bestHotRps
    verdicts.push({
      check: `${label}: calls/s at 512 connections ≥ ${NO_COLLAPSE_SHARE * 100}% of its best phase's (no collapse)`,
      value: `${f0(t.at512Rps)} / ${f0(t.bestHotRps)} = ${pct(share)}`,
      met: judged(share, (x) => x >= NO_COLLAPSE_SHARE)
    })
  }
  // One instance as the instance checks read it: behind the same balancer as the two (tollgate-pg-lb)
  // when that target ran, so both pay the same hop; else the direct one.
  const lb = byName.get("tollgate-pg-lb")
  const one = lb ?? pg1
  const oneLabel = lb === undefined ? "1 instance" : "1 instance, both behind the balancer"
  if (one !== undefined && pg2 !== undefined) {
    const projects = pg2.projectsRps / one.projectsRps
    verdicts.push({
      check: `2 instances ≥ ${oneLabel}, 8 projects`,
      value: `${f0(pg2.projectsRps)} / ${f0(one.projectsRps)} = ${f2(projects)}×${byRound(pg2.projectsRpsByRound, one.projectsRpsByRound)}`,
      met: judged(projects, (x) => x >= 1)
    })
    const hot = pg2.bestHotRps / one.bestHotRps
    verdicts.push({
      check: `2 instances ≥ ${oneLabel}, one hot project (best phase of each)`,
      value: `${f0(pg2.bestHotRps)} / ${f0(one.bestHotRps)} = ${f2(hot)}×${byRound(pg2.bestHotRpsByRound, one.bestHotRpsByRound)}`,
      met: judged(hot, (x) => x >= 1)
    })
  }
  const pg2a = byName.get("tollgate-pg2a")
  if (one !== undefined && pg2a !== undefined) {
    const projects = pg2a.projectsRps / one.projectsRps
    verdicts.push({
      check: `2 instances with key affinity ≥ ${oneLabel}, 8 projects`,
      value: `${f0(pg2a.projectsRps)} / ${f0(one.projectsRps)} = ${f2(projects)}×${byRound(pg2a.projectsRpsByRound, one.projectsRpsByRound)}`,
      met: judged(projects, (x) => x >= 1)
    })
    const hot = pg2a.bestHotRps / one.bestHotRps
    verdicts.push({
      check: `2 instances with key affinity ≥ ${oneLabel}, one hot project (best phase of each)`,
      value: `${f0(pg2a.bestHotRps)} / ${f0(one.bestHotRps)} = ${f2(hot)}×${byRound(pg2a.bestHotRpsByRound, one.bestHotRpsByRound)}`,
      met: judged(hot, (x) => x >= 1)
    })
  }
  // The control (docs/decisions/0059): the instance checks for the bare Node proxy, 1 and 2 processes
  // behind the same balancer — what a second process costs a server with no database, no limiter and no
  // chain on this box. Beside it, Tollgate's round-robin ratio over the control's: what two instances
  // cost Tollgate beyond what they cost any process here.
  const bareOne = byName.get(CONTROL_TARGETS[0])
  const bareTwo = byName.get(CONTROL_TARGETS[1])
  if (bareOne !== undefined && bareTwo !== undefined) {
    const phases = [
      ["8 projects", (r: ScaleFigures) => r.projectsRps],
      ["one hot project (best phase of each)", (r: ScaleFigures) => r.bestHotRps]
    ] as const
    for (const [phase, rps] of phases) {
      const ratio = rps(bareTwo) / rps(bareOne)
      const tollgate = one !== undefined && pg2 !== undefined ? rps(pg2) / rps(one) / ratio : NaN
      verdicts.push({
        check: `control, not a target: the bare Node proxy, 2 processes ≥ 1, both behind the balancer, ${phase}`,
        value: `${f0(rps(bareTwo))} / ${f0(rps(bareOne))} = ${f2(ratio)}×${Number.isFinite(tollgate) ? `; Tollgate's 2-instance ratio over it ${f2(tollgate)}×` : ""}`,
        met: judged(ratio, (x) => x >= 1),
        control: true
      })
    }
  }
  if (portAlone !== undefined) {
    verdicts.push({
      check: `store port alone (bench/pgHotProject.ts), one hot project ≥ ${PORT_ALONE_CALLS_PER_S.toLocaleString("en-US")} governed calls/s`,
      value: `${f0(portAlone)} calls/s`,
      met: judged(portAlone, (x) => x >= PORT_ALONE_CALLS_PER_S)
    })
  }
  return verdicts
}

/** `tollgate_store_round_trips_total 123` and `tollgate_store_checkouts_total 45` out of a /metrics text (NaN when absent). */
export interface StoreCounters {
  readonly roundTrips: number
  readonly checkouts: number
  /** Group commit (issue 40): settlement and reservation statements and the calls they carried; chain heads found moved; calls shed. NaN on a tree without them. */
  readonly settleBatches: number
  readonly settlements: number
  readonly reserveBatches: number
  readonly reservations: number
  readonly headMoved: number
  /** Settlement batches sealed under their chains' writer lock (docs/decisions/0056; NaN on a tree without it). */
  readonly chainLocked: number
  /** Settlements put back in their lane's queue after their head moved (docs/decisions/0058). */
  readonly requeued: number
  readonly shed: number
}

export const storeCounters = (metrics: string): StoreCounters => {
  // Summed over a counter's label sets (tollgate_store_shed_total{bound=…}).
  const read = (name: string) => {
    const all = [...metrics.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\d+(?:\\.\\d+)?)$`, "gm"))]
    return all.length === 0 ? NaN : all.reduce((n, m) => n + Number(m[1]), 0)
  }
  return {
    roundTrips: read("tollgate_store_round_trips_total"),
    checkouts: read("tollgate_store_checkouts_total"),
    settleBatches: read("tollgate_store_settle_batches_total"),
    settlements: read("tollgate_store_batched_settlements_total"),
    reserveBatches: read("tollgate_store_reserve_batches_total"),
    reservations: read("tollgate_store_batched_reservations_total"),
    headMoved: read("tollgate_store_head_moved_total"),
    chainLocked: read("tollgate_store_chain_locked_total"),
    requeued: read("tollgate_store_settlements_requeued_total"),
    shed: read("tollgate_store_shed_total")
  }
}

/** The connection counts of `--curve 16,32,…`: positive integers, ascending, each once. */
export const curvePoints = (spec: string | undefined): ReadonlyArray<number> => {
  if (spec === undefined || spec.trim() === "") return []
  const xs = spec.split(",").map((s) => Number(s.trim()))
  for (const x of xs) if (!Number.isInteger(x) || x < 1) throw new Error(`--curve expects connection counts like 16,32,64, got ${spec}`)
  return [...new Set(xs)].sort((a, b) => a - b)
}
