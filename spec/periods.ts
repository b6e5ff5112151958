/**
 * Budget periods (issue 41, DESIGN §9): which window a call's money belongs to.
 *
 * A project's `budget_period` is `month` (the default, as before), `week` (ISO 8601: Monday to
 * Sunday, numbered in its ISO week-year), `day` or `total` (one window forever), counted in the
 * project's `time_zone` (an IANA name, default `UTC`). A call belongs to the window of its start.
 *
 * A window is named by a label that also sorts in time order within one kind:
 *   month `2026-11`   week `2026-W48`   day `2026-11-28`   total `total`
 *
 * The rules the properties in test/spec/periods.test.ts hold this module to:
 *   - every instant lies in the bounds of its own window: start ≤ t < end;
 *   - windows tile time: the end of one is the start of the next, with no gap and no overlap;
 *   - `windowOf(month, UTC)` is exactly the monthly window the ledger has always used (ledger.periodOf).
 * Bounds are found by search on the label function itself, so a daylight-saving gap at midnight (a day
 * that starts at 01:00) or an odd historical offset needs no special case.
 *
 * Pure: only the ECMAScript `Intl` API, which every Node and browser has.
 */

export type BudgetPeriod = "month" | "week" | "day" | "total"

export const BUDGET_PERIODS: ReadonlyArray<BudgetPeriod> = ["month", "week", "day", "total"]

export const DEFAULT_BUDGET_PERIOD: BudgetPeriod = "month"
export const DEFAULT_TIME_ZONE = "UTC"

/** The one label of the `total` period. */
export const TOTAL = "total"

export const isBudgetPeriod = (s: unknown): s is BudgetPeriod => typeof s === "string" && (BUDGET_PERIODS as ReadonlyArray<string>).includes(s)

// ---------------------------------------------------------------------------------------------
// Local calendar fields of an instant in a time zone

interface LocalDate {
  readonly year: number
  /** 1..12 */
  readonly month: number
  /** 1..31 */
  readonly day: number
}

const formatters = new Map<string, Intl.DateTimeFormat>()

const formatterOf = (timeZone: string): Intl.DateTimeFormat => {
  let f = formatters.get(timeZone)
  if (f === undefined) {
    f = new Intl.DateTimeFormat("en-US", { timeZone, year: "numeric", month: "numeric", day: "numeric", era: "short" })
    formatters.set(timeZone, f)
  }
  return f
}

/** True for a time zone this runtime knows (IANA names such as `Europe/Paris`, and `UTC`). */
export const isTimeZone = (s: unknown): s is string => {
  if (typeof s !== "string" || s.length === 0 || s.length > 64) return false
  try {
    formatterOf(s)
    return true
  } catch {
    return false
  }
}

/** The calendar date an instant falls on in `timeZone` (proleptic Gregorian, astronomical years). */
const localDate = (millis: number, timeZone: string): LocalDate => {
  if (timeZone === "UTC") {
    const d = new Date(millis)
    return { year: d.getUTCFullYear(), month: d.getUTCMonth() + 1, day: d.getUTCDate() }
  }
  let year = 0
  let month = 0
  let day = 0
  let bc = false
  for (const p of formatterOf(timeZone).formatToParts(millis)) {
    if (p.type === "year") year = Number(p.value)
    else if (p.type === "month") month = Number(p.value)
    else if (p.type === "day") day = Number(p.value)
    else if (p.type === "era") bc = p.value.startsWith("B")
  }
  return { year: bc ? 1 - year : year, month, day }
}

const pad = (n: number, width: number): string => String(n).padStart(width, "0")

/** Day of the week of a calendar date, 1 = Monday … 7 = Sunday (ISO 8601). */
const isoWeekday = (d: LocalDate): number => {
  const wd = new Date(Date.UTC(d.year, d.month - 1, d.day)).getUTCDay()
  return wd === 0 ? 7 : wd
}

/** The ISO 8601 week-year and week number of a calendar date: the week belongs to the year of its Thursday. */
const isoWeek = (d: LocalDate): { readonly year: number; readonly week: number } => {
  const dayMs = 86_400_000
  const date = Date.UTC(d.year, d.month - 1, d.day)
  const thursday = new Date(date + (4 - isoWeekday(d)) * dayMs)
  const year = thursday.getUTCFullYear()
  const week = Math.floor((thursday.getTime() - Date.UTC(year, 0, 1)) / dayMs / 7) + 1
  return { year, week }
}

// ---------------------------------------------------------------------------------------------
// Labels

/** The label of the window an instant (milliseconds since the epoch, years 0000–9999) belongs to. */
export const windowOf = (period: BudgetPeriod, timeZone: string, millis: number): string => {
  if (period === "total") return TOTAL
  const d = localDate(millis, timeZone)
  switch (period) {
    case "month":
      return `${pad(d.year, 4)}-${pad(d.month, 2)}`
    case "day":
      return `${pad(d.year, 4)}-${pad(d.month, 2)}-${pad(d.day, 2)}`
    case "week": {
      const w = isoWeek(d)
      return `${pad(w.year, 4)}-W${pad(w.week, 2)}`
    }
  }
}

/** How each period's window label is written (what a caller naming a window is told). */
export const LABEL_FORM: Record<BudgetPeriod, string> = { month: "YYYY-MM", week: "YYYY-Www (ISO week)", day: "YYYY-MM-DD", total: "total" }

const LABEL: Record<BudgetPeriod, RegExp> = {
  month: /^(\d{4})-(0[1-9]|1[0-2])$/,
  week: /^(\d{4})-W(0[1-9]|[1-4]\d|5[0-3])$/,
  day: /^(\d{4})-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/,
  total: /^total$/
}

/** The calendar date a window begins on, or undefined when the label is not a window of that period. */
const firstDate = (period: Exclude<BudgetPeriod, "total">, label: string): LocalDate | undefined => {
  const m = LABEL[period].exec(label)
  if (m === null) return undefined
  const year = Number(m[1])
  if (period === "month") return { year, month: Number(m[2]), day: 1 }
  if (period === "day") {
    const d = { year, month: Number(m[2]), day: Number(m[3]) }
    // 2026-02-30 is not a day: Date.UTC would roll it over to March.
    const back = new Date(Date.UTC(year, d.month - 1, d.day))
    back.setUTCFullYear(year)
    return back.getUTCMonth() === d.month - 1 ? d : undefined
  }
  // Monday of ISO week 1 is the Monday of the week holding 4 January.
  const jan4: LocalDate = { year, month: 1, day: 4 }
  const monday = Date.UTC(year, 0, 4) - (isoWeekday(jan4) - 1) * 86_400_000 + (Number(m[2]) - 1) * 7 * 86_400_000
  const md = new Date(monday)
  const first = { year: md.getUTCFullYear(), month: md.getUTCMonth() + 1, day: md.getUTCDate() }
  // Week 53 exists only in years that have it.
  return isoWeek(first).year === year ? first : undefined
}

/** True when `label` names a window of `period` (e.g. `2026-W48` for week, `total` for total). */
export const isWindowLabel = (period: BudgetPeriod, label: string): boolean =>
  period === "total" ? label === TOTAL : firstDate(period, label) !== undefined

// ---------------------------------------------------------------------------------------------
// Bounds

/** The instants a window covers, [startMillis, endMillis); `total` covers all time. */
export interface WindowBounds {
  readonly startMillis: number
  readonly endMillis: number
}

/** All the instants a JavaScript Date can hold. */
const ALL_TIME: WindowBounds = { startMillis: -8_640_000_000_000_000, endMillis: 8_640_000_000_000_000 }

/** The first instant at or after which `label(t) ≥ target`, searched in [lo, hi] (label non-decreasing in t). */
const firstInstantFrom = (period: BudgetPeriod, timeZone: string, target: string, lo: number, hi: number): number => {
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2)
    if (windowOf(period, timeZone, mid) >= target) hi = mid
    else lo = mid + 1
  }
  return lo
}

/** Local midnight of a calendar date, less or more than any offset a zone has ever used (±26 h). */
const SLACK = 26 * 3_600_000

/** The instant a window labelled `label` begins: the first instant whose window is `label` or later. */
const startOf = (period: Exclude<BudgetPeriod, "total">, timeZone: string, label: string, first: LocalDate): number => {
  const guess = new Date(Date.UTC(2000, first.month - 1, first.day))
  guess.setUTCFullYear(first.year)
  return firstInstantFrom(period, timeZone, label, guess.getTime() - SLACK, guess.getTime() + SLACK)
}

/** The label of the window after `label` (same period). */
export const nextWindow = (period: BudgetPeriod, label: string): string | undefined => {
  if (period === "total") return undefined
  const first = firstDate(period, label)
  if (first === undefined) return undefined
  const d = new Date(Date.UTC(2000, first.month - 1, first.day))
  d.setUTCFullYear(first.year)
  if (period === "month") d.setUTCMonth(d.getUTCMonth() + 1)
  else d.setUTCDate(d.getUTCDate() + (period === "day" ? 1 : 7))
  return windowOf(period, "UTC", d.getTime())
}

/**
 * The instants of a window, [start, end): start is the first instant whose label is `label`, end the
 * first of the next window. Undefined when the label is not a window of the period.
 */
export const windowBounds = (period: BudgetPeriod, timeZone: string, label: string): WindowBounds | undefined => {
  if (period === "total") return label === TOTAL ? ALL_TIME : undefined
  const first = firstDate(period, label)
  const next = nextWindow(period, label)
  if (first === undefined || next === undefined) return undefined
  const nextFirst = firstDate(period, next)!
  return { startMillis: startOf(period, timeZone, label, first), endMillis: startOf(period, timeZone, next, nextFirst) }
}

/**
 * `windowOf` for one period and zone, remembering the bounds of the last window it named: a call's
 * window is then two comparisons, not a calendar computation (a zone's label costs ≈ 4 µs in Intl).
 */
export const windowLabeller = (period: BudgetPeriod, timeZone: string): ((millis: number) => string) => {
  let label = ""
  let start = 0
  let end = 0
  return (millis) => {
    if (millis >= start && millis < end) return label
    label = windowOf(period, timeZone, millis)
    const b = windowBounds(period, timeZone, label)!
    start = b.startMillis
    end = b.endMillis
    return label
  }
}

const labellers = new Map<string, (millis: number) => string>()

/**
 * The window label of an instant for a project's period and zone, each (period, zone) pair's labeller
 * made once and kept (a process meets a handful of zones): the governed path asks it once a call.
 */
export const windowAt = (period: BudgetPeriod, timeZone: string, millis: number): string => {
  const key = `${period} ${timeZone}`
  let labeller = labellers.get(key)
  if (labeller === undefined) labellers.set(key, (labeller = windowLabeller(period, timeZone)))
  return labeller(millis)
}
