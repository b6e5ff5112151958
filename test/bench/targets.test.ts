/** The benchmark's target verdicts (bench/lib/targets.ts): each check judged on the run's own figures. */
import { describe, expect, it } from "vitest"
import { judgeTargets, type TargetFigures } from "../../bench/lib/targets.ts"

const row = (target: string, maxRps: number, addedP50Ms: number, addedP99Ms: number, achievedRps = 1000): TargetFigures => ({ target, maxRps, addedP50Ms, addedP99Ms, achievedRps })
const metOf = (verdicts: ReturnType<typeof judgeTargets>["verdicts"], target: string) => Object.fromEntries(verdicts.filter((v) => v.target === target).map((v) => [v.check, v.met]))

describe("bench target verdicts", () => {
  it("judges Tollgate and the floor against the bare proxy and Portkey of the same run, bounds included", () => {
    const { verdicts } = judgeTargets(
      [row("baseline", 16000, 0, 0), row("bare", 10000, 0.3, 4), row("floor", 6000, 1, 5), row("tollgate", 5999, 1.01, 5.5), row("portkey", 6000, 1.01, 30)],
      1000
    )
    expect(metOf(verdicts, "floor")).toEqual({
      "added p50 @1000 RPS ≤ 1 ms": true,
      "added p99 @1000 RPS ≤ 5 ms": true,
      "max RPS ≥ 60% of the bare proxy's": true,
      "max RPS ≥ Portkey's": true,
      "added p50 @1000 RPS ≤ Portkey's": true
    })
    expect(metOf(verdicts, "tollgate")).toEqual({
      "added p50 @1000 RPS ≤ 1 ms": false,
      "added p99 @1000 RPS ≤ 5 ms": false,
      "max RPS ≥ 60% of the bare proxy's": false,
      "max RPS ≥ Portkey's": false,
      "added p50 @1000 RPS ≤ Portkey's": true
    })
    expect(verdicts.find((v) => v.target === "tollgate" && v.check.startsWith("max RPS ≥ 60%"))?.value).toBe("59.9%")
  })

  it("leaves out a check whose reference target did not run, and does not judge a figure that was not measured", () => {
    const { verdicts } = judgeTargets([row("tollgate", 3000, Number.NaN, 40)], 1000)
    expect(verdicts.map((v) => [v.check, v.met])).toEqual([
      ["added p50 @1000 RPS ≤ 1 ms", undefined],
      ["added p99 @1000 RPS ≤ 5 ms", false]
    ])
  })

  it("names the targets that could not keep up with the offered rate", () => {
    const { saturated } = judgeTargets([row("baseline", 16000, 0, 0, 900), row("bare", 9000, 0.3, 4, 980), row("tollgate", 1600, 30, 900, 940)], 1000)
    expect(saturated).toEqual(["tollgate"])
  })
})
