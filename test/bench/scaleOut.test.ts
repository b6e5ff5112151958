/** Issue 40's verdicts for the scale-out store (bench/lib/scaleOut.ts): each judged on one run's figures, bounds included. */
import { describe, expect, it } from "vitest"
import { curvePoints, judgeScaleOut, pairedRatios, type ScaleFigures, storeCounters } from "../../bench/lib/scaleOut.ts"

const row = (target: string, o: Partial<ScaleFigures> = {}): ScaleFigures => ({
  target,
  hot16Rps: 400,
  hot16CpuUs: 1000,
  projectsRps: 800,
  at512Rps: 380,
  bestHotRps: 400,
  ...o
})
const metOf = (v: ReturnType<typeof judgeScaleOut>) => Object.fromEntries(v.map((x) => [x.check, x.met]))

describe("scale-out verdicts (issue 40)", () => {
  it("judges PostgreSQL against SQLite of the same run, on the bounds", () => {
    const sqlite = row("tollgate", { hot16Rps: 400, hot16CpuUs: 1000 })
    const onBounds = row("tollgate-pg", { hot16Rps: 200, hot16CpuUs: 2000, at512Rps: 360, bestHotRps: 400, projectsRps: 500 })
    const pg2 = row("tollgate-pg2", { at512Rps: 450, bestHotRps: 400, projectsRps: 500 })
    expect(metOf(judgeScaleOut([sqlite, onBounds, pg2], 1500))).toEqual({
      "PostgreSQL 1 instance ≥ 50% of SQLite's calls/s, 16 callers, one hot project": true,
      "PostgreSQL 1 instance gateway CPU a call ≤ 2× SQLite's, same phase": true,
      "PostgreSQL 1 instance: calls/s at 512 connections ≥ 90% of its best phase's (no collapse)": true,
      "PostgreSQL 2 instances: calls/s at 512 connections ≥ 90% of its best phase's (no collapse)": true,
      "2 instances ≥ 1 instance, 8 projects": true,
      "2 instances ≥ 1 instance, one hot project (best phase of each)": true,
      "store port alone (bench/pgHotProject.ts), one hot project ≥ 1,500 governed calls/s": true
    })
    const under = row("tollgate-pg", { hot16Rps: 199, hot16CpuUs: 2001, at512Rps: 359, bestHotRps: 400, projectsRps: 501 })
    const pg2Under = row("tollgate-pg2", { at512Rps: 100, bestHotRps: 399, projectsRps: 500 })
    const v = judgeScaleOut([sqlite, under, pg2Under], 1499)
    expect(Object.values(metOf(v)).every((m) => m === false)).toBe(true)
    expect(v.find((x) => x.check.startsWith("PostgreSQL 1 instance ≥"))?.value).toBe("199 / 400 = 49.7%")
    expect(v.find((x) => x.check.startsWith("2 instances ≥ 1 instance, 8"))?.value).toBe("500 / 501 = 1.00×")
  })

  it("judges the two instances with key affinity against one instance on 8 projects and on the hot project", () => {
    const v = judgeScaleOut([row("tollgate-pg", { projectsRps: 400, bestHotRps: 300 }), row("tollgate-pg2a", { projectsRps: 400, bestHotRps: 300 })])
    expect(metOf(v)["2 instances with key affinity ≥ 1 instance, 8 projects"]).toBe(true)
    expect(metOf(v)["2 instances with key affinity ≥ 1 instance, one hot project (best phase of each)"]).toBe(true)
    const under = metOf(judgeScaleOut([row("tollgate-pg", { projectsRps: 400, bestHotRps: 300 }), row("tollgate-pg2a", { projectsRps: 399, bestHotRps: 299 })]))
    expect(under["2 instances with key affinity ≥ 1 instance, 8 projects"]).toBe(false)
    expect(under["2 instances with key affinity ≥ 1 instance, one hot project (best phase of each)"]).toBe(false)
  })

  it("judges two instances against one behind the same balancer when that target ran, not the direct one", () => {
    const direct = row("tollgate-pg", { projectsRps: 500, bestHotRps: 500 })
    const behind = row("tollgate-pg-lb", { projectsRps: 400, bestHotRps: 400 })
    const two = row("tollgate-pg2", { projectsRps: 420, bestHotRps: 399 })
    expect(metOf(judgeScaleOut([direct, behind, two]))).toMatchObject({
      "2 instances ≥ 1 instance, both behind the balancer, 8 projects": true,
      "2 instances ≥ 1 instance, both behind the balancer, one hot project (best phase of each)": false
    })
    expect(metOf(judgeScaleOut([direct, two]))["2 instances ≥ 1 instance, 8 projects"]).toBe(false)
  })

  it("leaves out a check whose targets did not run, and does not judge a figure not measured", () => {
    expect(judgeScaleOut([row("tollgate")])).toEqual([])
    const v = judgeScaleOut([row("tollgate"), row("tollgate-pg", { at512Rps: Number.NaN, hot16CpuUs: Number.NaN })])
    expect(metOf(v)).toEqual({
      "PostgreSQL 1 instance ≥ 50% of SQLite's calls/s, 16 callers, one hot project": true,
      "PostgreSQL 1 instance gateway CPU a call ≤ 2× SQLite's, same phase": undefined
    })
  })

  it("reports the bare proxy's 1 and 2 processes as a control beside the instance checks, with Tollgate's ratio over it", () => {
    const v = judgeScaleOut([
      row("tollgate-pg-lb", { projectsRps: 800, bestHotRps: 1000 }),
      row("tollgate-pg2", { projectsRps: 720, bestHotRps: 850 }),
      row("bare-lb", { projectsRps: 2000, bestHotRps: 4000 }),
      row("bare2", { projectsRps: 1800, bestHotRps: 4000 })
    ])
    const controls = v.filter((x) => x.control === true)
    expect(controls.map((x) => [x.check, x.value, x.met])).toEqual([
      ["control, not a target: the bare Node proxy, 2 processes ≥ 1, both behind the balancer, 8 projects", "1,800 / 2,000 = 0.90×; Tollgate's 2-instance ratio over it 1.00×", false],
      ["control, not a target: the bare Node proxy, 2 processes ≥ 1, both behind the balancer, one hot project (best phase of each)", "4,000 / 4,000 = 1.00×; Tollgate's 2-instance ratio over it 0.85×", true]
    ])
    // The control never stands in for a target: the instance checks are judged as before.
    expect(metOf(v.filter((x) => x.control !== true))["2 instances ≥ 1 instance, both behind the balancer, 8 projects"]).toBe(false)
    // Without the Tollgate pair, the control alone, with no ratio over it.
    const alone = judgeScaleOut([row("bare-lb", { projectsRps: 100 }), row("bare2", { projectsRps: 101 })])
    expect(alone.map((x) => x.value)[0]).toBe("101 / 100 = 1.01×")
  })

  it("shows the instance checks' ratios paired by round beside the ratio of the medians, which alone is judged", () => {
    // Round by round, two instances at 0.90×, 1.10×, 1.10× of one; the medians 450 / 500 = 0.90×.
    const one = row("tollgate-pg-lb", { projectsRps: 500, bestHotRps: 500, projectsRpsByRound: [500, 600, 400], bestHotRpsByRound: [500, 600, 400] })
    const two = row("tollgate-pg2", { projectsRps: 450, bestHotRps: 450, projectsRpsByRound: [450, 660, 440], bestHotRpsByRound: [450, 660, 440] })
    const v = judgeScaleOut([one, two])
    const projects = v.find((x) => x.check === "2 instances ≥ 1 instance, both behind the balancer, 8 projects")
    expect(projects?.value).toBe("450 / 500 = 0.90×; paired by round: median 1.10× [0.90, 1.10] over 3 rounds")
    // The pairs are information: the verdict is still the ratio of the medians, as issue 40 judged it.
    expect(projects?.met).toBe(false)
    expect(v.find((x) => x.check.endsWith("one hot project (best phase of each)"))?.value).toContain("median 1.10× [0.90, 1.10] over 3 rounds")
    // Pairs are by round: a round where either did not run is left out, and under two pairs none is shown.
    expect(pairedRatios([450, Number.NaN, 440], [500, 600, 400])).toEqual({ median: (0.9 + 1.1) / 2, min: 0.9, max: 1.1, n: 2 })
    expect(pairedRatios([450, 660], [500, Number.NaN])).toBeUndefined()
    expect(pairedRatios([450], [500])).toBeUndefined()
    expect(judgeScaleOut([row("tollgate-pg"), row("tollgate-pg2")]).map((x) => x.value).join(" ")).not.toContain("paired")
  })

  it("reads the store counters out of /metrics and the curve out of --curve", () => {
    const text = [
      "# TYPE tollgate_store_round_trips_total counter",
      "tollgate_store_round_trips_total 1234",
      "tollgate_store_checkouts_total 56",
      "tollgate_store_retries_total{reason=\"deadlock\"} 0"
    ].join("\n")
    expect(storeCounters(text)).toMatchObject({ roundTrips: 1234, checkouts: 56 })
    // Counters the text does not have read NaN, never 0: a missing metric is not a measured zero.
    expect(storeCounters(text).shed).toBeNaN()
    expect(storeCounters("nothing here").roundTrips).toBeNaN()
    expect(curvePoints("512, 16,32,16")).toEqual([16, 32, 512])
    expect(curvePoints(undefined)).toEqual([])
    expect(() => curvePoints("16,abc")).toThrow(/--curve/)
  })
})
