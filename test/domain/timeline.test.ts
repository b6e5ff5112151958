/** The call timeline (src/domain/timeline.ts): per-stage durations between marks, for one caller at a time. */
import { describe, expect, it } from "vitest"
import { makeTimeline, timeline } from "../../src/domain/timeline.ts"

describe("timeline", () => {
  it("records each stage as the time since the previous mark of the call, and medians over calls", () => {
    let t = 0
    const tl = makeTimeline(() => t)
    for (const [auth, store] of [[1, 10], [3, 30], [2, 20]] as const) {
      tl.begin()
      t += auth
      tl.mark("auth")
      tl.span("store (in worker)", store / 2)
      t += store
      tl.end("store")
      t += 100 // between calls: no stage
      tl.mark("after the end")
    }
    expect(tl.report()).toEqual([
      { stage: "auth", span: false, n: 3, p50Ms: 2, p90Ms: 3 },
      { stage: "store (in worker)", span: true, n: 3, p50Ms: 10, p90Ms: 15 },
      { stage: "store", span: false, n: 3, p50Ms: 20, p90Ms: 30 }
    ])
    tl.reset()
    expect(tl.report()).toEqual([])
  })

  it("is off unless TOLLGATE_TIMELINE=1: marks record nothing", () => {
    expect(process.env.TOLLGATE_TIMELINE).toBeUndefined()
    timeline.begin()
    timeline.mark("auth")
    timeline.end("write")
    expect(timeline.on).toBe(false)
    expect(timeline.report()).toEqual([])
  })
})
