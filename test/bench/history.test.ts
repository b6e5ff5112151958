/** bench/results/HISTORY.md's run table (bench/lib/history.ts): one row per recorded run of bench/run.ts, appended at the table's end. */
import { readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { appendHistoryRow, HISTORY_HEADER, HISTORY_MARKER, type HistoryRun, historyRow } from "../../bench/lib/history.ts"

const target = (name: string, closedRps: number | null, oneCaller: number, ttfb: number | null) => ({
  target: name,
  oneCaller: { p50: oneCaller },
  oneCallerTtfb: { p50: ttfb },
  open200: { p50: oneCaller / 2 },
  closedRps,
  closedCpuUsPerReq: closedRps === null ? null : 1e6 / closedRps,
  peakRssMb: 250.4
})
const run = (o: Partial<HistoryRun> = {}): HistoryRun => ({
  config: { quick: false, rounds: 2, durationS: 6 },
  machine: { cpu: "Intel(R) Xeon(R) Processor", commit: "393d82d" },
  command: "npm run bench -- --targets baseline,bare,floor,tollgate --rounds 2 --duration 6 --rates 200",
  started: "2026-11-27T22:22:03.123Z",
  summary: [target("baseline", 13000, 0, 0), target("bare", 5000, 0.89, 1.22), target("floor", 2000, 4.23, 2.29), target("tollgate", 1875, 4.31, 2.53)],
  ...o
})
const cells = (row: string) => row.split("|").slice(1, -1).map((c) => c.trim())

describe("the benchmark's history table", () => {
  it("a row has one cell per header column: date, commit, host, phases and the headline figures", () => {
    const row = historyRow(run())
    expect(cells(row)).toHaveLength(cells(HISTORY_HEADER[0]).length)
    expect(cells(row)).toEqual([
      "2026-11-27 22:22",
      "393d82d",
      "Intel Xeon",
      "2 × 6 s",
      "5,000 / 2,000 / 1,875",
      "93.8%",
      "500 / 533",
      "+0.89 / +4.23 / +4.31",
      "+1.22 / +2.29 / +2.53",
      "+2.12 / +2.15",
      "250",
      ""
    ])
  })

  it("a phase or target the run left out reads –, and a target beyond the four is named with its figures", () => {
    const partial = run({
      command: "npm run bench -- --targets bare,floor,bare-durable --only one-caller,one-caller-stream --rounds 3",
      config: { quick: false, rounds: 3, durationS: 8 },
      summary: [target("baseline", null, 0, 0), target("bare", null, 0.9, 1), target("floor", null, 4, null), target("bare-durable", null, 2.14, 0.84)]
    })
    const c = cells(historyRow(partial))
    expect(c[3]).toBe("3 × 8 s, only one-caller,one-caller-stream")
    expect(c[4]).toBe("– / – / –")
    expect(c[5]).toBe("–")
    expect(c[7]).toBe("+0.90 / +4.00 / –")
    expect(c[8]).toBe("+1.00 / – / –")
    expect(c[10]).toBe("–")
    expect(c[11]).toBe("bare-durable: one caller +2.14, TTFB +0.84")
  })

  it("appends the row after the table's last row, whatever follows the table", () => {
    const text = ["# History", "", HISTORY_MARKER, ...HISTORY_HEADER, "| old 1 |", "| old 2 |", "", "## Timelines", "| not | this |", ""].join("\n")
    const after = appendHistoryRow(text, "| new |").split("\n")
    expect(after.slice(3)).toEqual([...HISTORY_HEADER, "| old 1 |", "| old 2 |", "| new |", "", "## Timelines", "| not | this |", ""])
  })

  it("(the check can fail) refuses a file without the marker or with another table under it", () => {
    expect(() => appendHistoryRow("# History\n| a |\n", "| new |")).toThrow(/marker/)
    expect(() => appendHistoryRow(`${HISTORY_MARKER}\n| a | b |\n| --- | --- |\n`, "| new |")).toThrow(/header/)
  })

  it("the committed HISTORY.md has the marker and header the bench appends under", () => {
    const text = readFileSync("bench/results/HISTORY.md", "utf8")
    const row = historyRow(run())
    expect(appendHistoryRow(text, row)).toContain(`\n${row}\n`)
  })
})
