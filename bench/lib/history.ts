/**
 * bench/results/HISTORY.md keeps one table row per recorded run of bench/run.ts: when, which commit,
 * which host and phases, and the headline figures (closed-loop RPS, CPU µs a call, the added p50s).
 * The run itself is written to `latest.md|json` (committed) and a timestamped copy to `runs/`
 * (ignored); this row is what stays of it once `latest` moves on.
 */
import { f0, signed } from "./stats.ts"

/** A figure as the report's JSON holds it: NaN (a phase not run) was written as null. */
type Figure = number | null | undefined

/** The part of a target's summary row (bench/run.ts `summary`) the history reads. */
export interface HistoryTarget {
  readonly target: string
  readonly oneCaller?: { readonly p50: Figure } | undefined
  readonly oneCallerTtfb?: { readonly p50: Figure } | undefined
  readonly open200?: { readonly p50: Figure } | undefined
  readonly closedRps?: Figure
  readonly closedCpuUsPerReq?: Figure
  readonly peakRssMb?: Figure
}

/** The part of a run's report (bench/run.ts `report`, `latest.json`) the history reads. */
export interface HistoryRun {
  readonly config: { readonly quick: boolean; readonly rounds: number; readonly durationS: number }
  readonly machine: { readonly cpu: string; readonly commit: string }
  readonly command: string
  readonly started: string
  readonly summary: ReadonlyArray<HistoryTarget>
}

export const HISTORY_HEADER = [
  "| run (UTC) | commit | host | phases | closed-loop RPS: bare / floor / Tollgate | Tollgate ÷ floor | CPU µs a call, closed: floor / Tollgate | one caller added p50 ms: bare / floor / Tollgate | stream TTFB added p50 ms: bare / floor / Tollgate | 200 RPS added p50 ms: floor / Tollgate | Tollgate RSS peak MB | other targets |",
  "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
] as const

/** The line HISTORY.md's table starts after; bench/run.ts appends rows at the table's end. */
export const HISTORY_MARKER = "<!-- bench/run.ts appends one row per recorded run to the table below -->"

const num = (x: Figure): number => (typeof x === "number" ? x : NaN)
const the = (run: HistoryRun, target: string) => run.summary.find((t) => t.target === target)
const each = (run: HistoryRun, targets: ReadonlyArray<string>, pick: (t: HistoryTarget) => string) =>
  targets.map((name) => {
    const t = the(run, name)
    return t === undefined ? "–" : pick(t)
  }).join(" / ")
const MAIN = ["baseline", "bare", "floor", "tollgate"]

/** "AMD EPYC", "Intel Xeon": the host's CPU as the report names it, without the marks. */
export const hostOf = (cpu: string) => cpu.replace(/\(R\)|\(TM\)|\bProcessor\b|\bCPU\b/g, "").replace(/\s+/g, " ").trim()

/** One row of HISTORY.md's table for one run's report. */
export const historyRow = (run: HistoryRun): string => {
  const rps = (t: HistoryTarget) => f0(num(t.closedRps))
  const p50 = (pick: (t: HistoryTarget) => Figure) => (t: HistoryTarget) => signed(num(pick(t)))
  const tollgate = the(run, "tollgate")
  const floor = the(run, "floor")
  const share = num(tollgate?.closedRps) / num(floor?.closedRps)
  const only = /--only (\S+)/.exec(run.command)?.[1]
  const phases = `${run.config.quick ? "quick " : ""}${run.config.rounds} × ${run.config.durationS} s${only === undefined ? "" : `, only ${only}`}`
  const others = run.summary
    .filter((t) => !MAIN.includes(t.target))
    .map((t) => {
      const parts = [
        Number.isFinite(num(t.closedRps)) ? `${f0(num(t.closedRps))} RPS` : undefined,
        Number.isFinite(num(t.oneCaller?.p50)) ? `one caller ${signed(num(t.oneCaller?.p50))}` : undefined,
        Number.isFinite(num(t.oneCallerTtfb?.p50)) ? `TTFB ${signed(num(t.oneCallerTtfb?.p50))}` : undefined
      ].filter((p) => p !== undefined)
      return `${t.target}: ${parts.length === 0 ? "–" : parts.join(", ")}`
    })
  const cells = [
    run.started.slice(0, 16).replace("T", " "),
    run.machine.commit,
    hostOf(run.machine.cpu),
    phases,
    each(run, ["bare", "floor", "tollgate"], rps),
    Number.isFinite(share) ? `${(share * 100).toFixed(1)}%` : "–",
    each(run, ["floor", "tollgate"], (t) => f0(num(t.closedCpuUsPerReq))),
    each(run, ["bare", "floor", "tollgate"], p50((t) => t.oneCaller?.p50)),
    each(run, ["bare", "floor", "tollgate"], p50((t) => t.oneCallerTtfb?.p50)),
    each(run, ["floor", "tollgate"], p50((t) => t.open200?.p50)),
    tollgate === undefined ? "–" : f0(num(tollgate.peakRssMb)),
    others.length === 0 ? "" : others.join("; ")
  ]
  return `| ${cells.join(" | ")} |`
}

/**
 * HISTORY.md's text with `row` added as the last row of the table that follows HISTORY_MARKER.
 * Throws when the marker or the table's header is missing: a run's row is never put anywhere else.
 */
export const appendHistoryRow = (text: string, row: string): string => {
  const lines = text.split("\n")
  const marker = lines.indexOf(HISTORY_MARKER)
  if (marker === -1) throw new Error("HISTORY.md has no run table marker")
  const header = marker + 1
  if (lines[header] !== HISTORY_HEADER[0] || lines[header + 1] !== HISTORY_HEADER[1]) throw new Error("HISTORY.md's run table does not start with the expected header")
  let end = header + 2
  while (end < lines.length && lines[end]!.startsWith("|")) end++
  return [...lines.slice(0, end), row, ...lines.slice(end)].join("\n")
}
