import fc from "fast-check"
import { describe, expect, it } from "vitest"
import * as Ledger from "../../spec/ledger.ts"
import * as Periods from "../../spec/periods.ts"
import { numRuns } from "./runs.ts"

const ZONES = ["UTC", "Europe/Paris", "America/New_York", "America/Santiago", "Asia/Kolkata", "Australia/Lord_Howe", "Pacific/Kiritimati", "Pacific/Apia", "Asia/Kathmandu"]
/** 1970 to 2100: the span where zones' rules (daylight saving, offset changes) are recorded. */
const instant = fc.integer({ min: 0, max: Date.UTC(2100, 0, 1) })
const zone = fc.constantFrom(...ZONES)
const period = fc.constantFrom<Periods.BudgetPeriod>("month", "week", "day")

describe("budget periods: examples", () => {
  it("names windows by month, ISO week, day and total", () => {
    const t = Date.UTC(2026, 10, 28, 12)
    expect(Periods.windowOf("month", "UTC", t)).toBe("2026-11")
    expect(Periods.windowOf("week", "UTC", t)).toBe("2026-W48")
    expect(Periods.windowOf("day", "UTC", t)).toBe("2026-11-28")
    expect(Periods.windowOf("total", "UTC", t)).toBe("total")
    // 1 January 2027 is a Friday: it belongs to week 53 of ISO year 2026.
    expect(Periods.windowOf("week", "UTC", Date.UTC(2027, 0, 1))).toBe("2026-W53")
    // Kiritimati is UTC+14: noon UTC on the 28th is already the 29th there.
    expect(Periods.windowOf("day", "Pacific/Kiritimati", t)).toBe("2026-11-29")
  })

  it("a day with no midnight begins at the first instant that is that day", () => {
    // Chile springs forward at 00:00 on 6 September 2026: the day begins at 01:00 local, 04:00 UTC.
    expect(Periods.windowBounds("day", "America/Santiago", "2026-09-06")).toEqual({
      startMillis: Date.UTC(2026, 8, 6, 4),
      endMillis: Date.UTC(2026, 8, 7, 3)
    })
  })

  it("a month in Paris begins at local midnight, an hour before UTC's", () => {
    expect(Periods.windowBounds("month", "Europe/Paris", "2026-11")).toEqual({ startMillis: Date.UTC(2026, 9, 31, 23), endMillis: Date.UTC(2026, 10, 30, 23) })
  })

  it("labels and zones are checked", () => {
    expect(Periods.isWindowLabel("week", "2026-W53")).toBe(true)
    expect(Periods.isWindowLabel("week", "2027-W53")).toBe(false)
    expect(Periods.isWindowLabel("day", "2026-02-29")).toBe(false)
    expect(Periods.isWindowLabel("day", "2028-02-29")).toBe(true)
    expect(Periods.isWindowLabel("month", "2026-13")).toBe(false)
    expect(Periods.isWindowLabel("total", "total")).toBe(true)
    expect(Periods.isWindowLabel("month", "total")).toBe(false)
    expect(Periods.isTimeZone("Europe/Paris")).toBe(true)
    expect(Periods.isTimeZone("Mars/Olympus_Mons")).toBe(false)
    expect(Periods.isTimeZone("")).toBe(false)
    expect(Periods.windowBounds("day", "UTC", "2026-02-30")).toBeUndefined()
  })
})

describe("budget periods: properties", () => {
  it("containment: every instant lies within the bounds of its own window", () => {
    fc.assert(
      fc.property(period, zone, instant, (p, tz, t) => {
        const label = Periods.windowOf(p, tz, t)
        expect(Periods.isWindowLabel(p, label)).toBe(true)
        const b = Periods.windowBounds(p, tz, label)!
        expect(b.startMillis <= t && t < b.endMillis).toBe(true)
      }),
      { numRuns }
    )
  })

  it("tiling: a window's first instant is in it, the instant before is in the previous window, and it ends where the next begins", () => {
    fc.assert(
      fc.property(period, zone, instant, (p, tz, t) => {
        const label = Periods.windowOf(p, tz, t)
        const b = Periods.windowBounds(p, tz, label)!
        expect(Periods.windowOf(p, tz, b.startMillis)).toBe(label)
        expect(Periods.windowOf(p, tz, b.startMillis - 1) < label).toBe(true)
        expect(Periods.windowOf(p, tz, b.endMillis - 1)).toBe(label)
        const next = Periods.nextWindow(p, label)!
        expect(Periods.windowOf(p, tz, b.endMillis)).toBe(next)
        expect(Periods.windowBounds(p, tz, next)!.startMillis).toBe(b.endMillis)
      }),
      { numRuns }
    )
  })

  it("labels sort in time order: a later instant never has an earlier window", () => {
    fc.assert(
      fc.property(period, zone, instant, instant, (p, tz, a, b) => {
        const [x, y] = a <= b ? [a, b] : [b, a]
        expect(Periods.windowOf(p, tz, x) <= Periods.windowOf(p, tz, y)).toBe(true)
      }),
      { numRuns }
    )
  })

  it("the default, a month in UTC, is the window the ledger has always used", () => {
    fc.assert(
      fc.property(instant, (t) => {
        expect(Periods.windowOf("month", "UTC", t)).toBe(Ledger.periodOf(t))
        expect(Periods.windowBounds("month", "UTC", Ledger.periodOf(t))).toEqual(Ledger.periodBounds(Ledger.periodOf(t)))
      }),
      { numRuns }
    )
  })

  it("the remembering labeller names the same window as windowOf, in any order of instants", () => {
    fc.assert(
      fc.property(period, zone, fc.array(instant, { minLength: 1, maxLength: 30 }), (p, tz, ts) => {
        const label = Periods.windowLabeller(p, tz)
        for (const t of ts) expect(label(t)).toBe(Periods.windowOf(p, tz, t))
      }),
      { numRuns: Math.ceil(numRuns / 4) }
    )
  })
})
