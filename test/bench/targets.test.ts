/** The benchmark's target verdicts (bench/lib/targets.ts): each of issue 18's checks judged on the run's own figures. */
import { describe, expect, it } from "vitest"
import { judgeTargets, overDurable, overFloor, type TargetFigures } from "../../bench/lib/targets.ts"

const added = (p50: number, p99: number) => ({ p50, p99 })
const row = (target: string, o: Partial<TargetFigures> = {}): TargetFigures => ({
  target,
  oneCaller: added(1, 2),
  oneCallerTtfb: added(1, 2),
  callers16: added(1, 3),
  open200: added(1, 3),
  closedRps: 1000,
  cpuUsPerCall: 500,
  idleRssMb: 100,
  peakRssMb: 200,
  ...o
})
const metOf = (verdicts: ReturnType<typeof judgeTargets>, target: string) => Object.fromEntries(verdicts.filter((v) => v.target === target).map((v) => [v.check, v.met]))

describe("bench target verdicts (issue 18)", () => {
  it("judges each latency target against the bare proxy of the same run, bounds included", () => {
    const bare = row("bare", { oneCaller: added(0.75, 1.75), oneCallerTtfb: added(0.5, 1), callers16: added(1, 4), open200: added(1, 4) })
    // Exactly on every bound: bare + 1 / + 3 at one caller, + 1 TTFB, + 1.5 / + 5 loaded. 0.25-multiples keep the sums exact.
    const onBounds = row("tollgate", { oneCaller: added(1.75, 4.75), oneCallerTtfb: added(1.5, 9), callers16: added(2.5, 9), open200: added(2.5, 9), closedRps: 900 })
    const over = row("tollgate", { oneCaller: added(1.875, 4.875), oneCallerTtfb: added(1.625, 0), callers16: added(2.625, 9.25), open200: added(2.625, 9.25), closedRps: 899 })
    const floor = row("floor", { closedRps: 1000, oneCallerTtfb: undefined })
    expect(metOf(judgeTargets([row("baseline"), bare, onBounds, floor]), "tollgate")).toEqual({
      "one caller added p50 ≤ bare + 1 ms": true,
      "one caller added p99 ≤ bare + 3 ms": true,
      "one caller, stream TTFB added p50 ≤ bare + 1 ms": true,
      "16 callers added p50 ≤ bare + 1.5 ms": true,
      "16 callers added p99 ≤ bare + 5 ms": true,
      "200 RPS added p50 ≤ bare + 1.5 ms": true,
      "200 RPS added p99 ≤ bare + 5 ms": true,
      "closed-loop RPS ≥ 90% of the governed floor's": true,
      "CPU µs per call (closed loop)": "reported",
      "RSS idle ≤ 150 MB": true,
      "RSS peak ≤ 300 MB": true
    })
    const missed = metOf(judgeTargets([bare, over, floor]), "tollgate")
    expect(Object.entries(missed).filter(([, met]) => met === true).map(([check]) => check)).toEqual(["RSS idle ≤ 150 MB", "RSS peak ≤ 300 MB"])
    expect(judgeTargets([bare, over, floor]).find((v) => v.target === "tollgate" && v.check.startsWith("closed-loop"))?.value).toBe("89.9%")
    expect(judgeTargets([bare, onBounds, floor]).find((v) => v.target === "tollgate" && v.check === "one caller added p50 ≤ bare + 1 ms")?.value).toBe("+1.00 ms over bare")
  })

  it("judges RSS idle and peak against 150 / 300 MB, and reports the CPU per call of Tollgate and the floor", () => {
    const v = judgeTargets([row("tollgate", { idleRssMb: 150.5, peakRssMb: 300 }), row("floor", { idleRssMb: 150, peakRssMb: 301, cpuUsPerCall: 321 })])
    expect(metOf(v, "tollgate")["RSS idle ≤ 150 MB"]).toBe(false)
    expect(metOf(v, "tollgate")["RSS peak ≤ 300 MB"]).toBe(true)
    expect(metOf(v, "floor")["RSS idle ≤ 150 MB"]).toBe(true)
    expect(metOf(v, "floor")["RSS peak ≤ 300 MB"]).toBe(false)
    expect(v.find((x) => x.target === "floor" && x.check.startsWith("CPU"))?.value).toBe("321 µs")
  })

  it("leaves out a check whose reference or phase did not run, does not judge a figure that was not measured, and keeps no withdrawn target", () => {
    // No bare proxy: no latency check. No floor: no throughput share. A row without a stream phase: no TTFB check.
    const alone = judgeTargets([row("tollgate", { cpuUsPerCall: Number.NaN })])
    expect(alone.map((x) => [x.check, x.met])).toEqual([
      ["CPU µs per call (closed loop)", undefined],
      ["RSS idle ≤ 150 MB", true],
      ["RSS peak ≤ 300 MB", true]
    ])
    const v = judgeTargets([row("bare"), row("tollgate", { open200: undefined, callers16: added(Number.NaN, 3) }), row("floor", { oneCallerTtfb: undefined })])
    expect(metOf(v, "tollgate")["16 callers added p50 ≤ bare + 1.5 ms"]).toBeUndefined()
    expect(Object.keys(metOf(v, "tollgate")).some((c) => c.startsWith("200 RPS"))).toBe(false)
    expect(Object.keys(metOf(v, "floor")).some((c) => c.includes("TTFB"))).toBe(false)
    expect(v.some((x) => /bare proxy's|Portkey|1000 RPS/.test(x.check))).toBe(false)
  })

  it("judges only the latency targets for the durable bare proxy (the disk's price), against the same bare proxy", () => {
    const bare = row("bare", { oneCaller: added(0.75, 1.75) })
    const v = judgeTargets([bare, row("bare-durable", { oneCaller: added(1.875, 2), callers16: added(2.5, 8), closedRps: 1, idleRssMb: 999 })])
    expect(metOf(v, "bare-durable")).toEqual({
      "one caller added p50 ≤ bare + 1 ms": false,
      "one caller added p99 ≤ bare + 3 ms": true,
      "one caller, stream TTFB added p50 ≤ bare + 1 ms": true,
      "16 callers added p50 ≤ bare + 1.5 ms": true,
      "16 callers added p99 ≤ bare + 5 ms": true,
      "200 RPS added p50 ≤ bare + 1.5 ms": true,
      "200 RPS added p99 ≤ bare + 5 ms": true
    })
    expect(v.find((x) => x.target === "bare-durable" && x.check === "one caller added p50 ≤ bare + 1 ms")?.value).toBe("+1.13 ms over bare")
    expect(judgeTargets([row("bare-durable")])).toEqual([])
  })

  it("reports each governed target's p50 over the durable bare proxy, phase by phase, and nothing without it", () => {
    const disk = row("bare-durable", { oneCaller: added(1.5, 9), oneCallerTtfb: added(0.5, 9), callers16: added(2, 9), open200: undefined })
    const over = overDurable([row("bare"), disk, row("tollgate", { oneCaller: added(2.75, 0) }), row("floor", { callers16: undefined })])
    expect(over).toEqual([
      { target: "tollgate", phase: "one caller", p50: 1.25 },
      { target: "tollgate", phase: "one caller, stream TTFB", p50: 0.5 },
      { target: "tollgate", phase: "16 callers", p50: -1 },
      { target: "floor", phase: "one caller", p50: -0.5 },
      { target: "floor", phase: "one caller, stream TTFB", p50: 0.5 }
    ])
    expect(overDurable([row("bare"), row("tollgate"), row("floor")])).toEqual([])
  })

  it("reports Tollgate's p50 over the governed floor, phase by phase, and nothing without the floor", () => {
    const floor = row("floor", { oneCaller: added(3.5, 9), oneCallerTtfb: added(1.25, 9), open200: undefined })
    const over = overFloor([row("bare"), row("bare-durable"), floor, row("tollgate", { oneCaller: added(3.75, 0), callers16: added(2.5, 0) })])
    expect(over).toEqual([
      { target: "tollgate", phase: "one caller", p50: 0.25 },
      { target: "tollgate", phase: "one caller, stream TTFB", p50: -0.25 },
      { target: "tollgate", phase: "16 callers", p50: 1.5 }
    ])
    expect(overFloor([row("bare"), row("tollgate")])).toEqual([])
  })

  it("judges the floor's stream time to first byte like Tollgate's, against the same bare proxy", () => {
    const bare = row("bare", { oneCallerTtfb: added(0.5, 1) })
    const v = judgeTargets([bare, row("tollgate", { oneCallerTtfb: added(1.625, 3) }), row("floor", { oneCallerTtfb: added(1.5, 2) })])
    expect(metOf(v, "floor")["one caller, stream TTFB added p50 ≤ bare + 1 ms"]).toBe(true)
    expect(metOf(v, "tollgate")["one caller, stream TTFB added p50 ≤ bare + 1 ms"]).toBe(false)
    expect(v.find((x) => x.target === "floor" && x.check.includes("TTFB"))?.value).toBe("+1.00 ms over bare")
  })
})
