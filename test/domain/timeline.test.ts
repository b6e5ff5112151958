/** The call timeline (src/domain/timeline.ts): per-stage durations between marks, for one caller at a time. */
import { describe, expect, it } from "vitest"
import { makeTimeline, timeline } from "../../src/domain/timeline.ts"

describe("timeline", () => {
  it("records each stage as the time since the previous mark of the call; quantiles over calls and the samples over 1 ms above the median", () => {
    let t = 0
    const tl = makeTimeline(() => t)
    for (const [auth, store] of [[1, 10], [3, 30], [2, 20], [2, 21], [4, 22]] as const) {
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
      // auth 1 2 2 3 4: the median 2, one sample (4) more than 1 ms above it; 3 is exactly 1 ms above
      { stage: "auth", span: false, n: 5, p50Ms: 2, p90Ms: 4, p99Ms: 4, over1Ms: 1 },
      { stage: "store (in worker)", span: true, n: 5, p50Ms: 10.5, p90Ms: 15, p99Ms: 15, over1Ms: 1 },
      { stage: "store", span: false, n: 5, p50Ms: 21, p90Ms: 30, p99Ms: 30, over1Ms: 1 }
    ])
    tl.reset()
    expect(tl.report()).toEqual([])
  })

  it("attributes the slowest 1% of calls to the stages they were slow in: each stage's mean excess over its own median", () => {
    let t = 0
    const tl = makeTimeline(() => t)
    expect(tl.tail()).toBeUndefined()
    // 200 calls: auth 1 ms and store 10 ms; two of them slow, one in auth (+5) and one in store (+9),
    // whose worker span is slow with it. A call begun and never ended is not counted.
    for (let n = 0; n < 200; n++) {
      tl.begin()
      t += n === 50 ? 6 : 1
      tl.mark("auth")
      tl.span("store (in worker)", n === 120 ? 12 : 4)
      t += n === 120 ? 19 : 10
      tl.end("store")
    }
    tl.begin()
    t += 500
    tl.mark("auth")
    const tail = tl.tail()!
    // The whole call: 198 × 11, then 16 and 20; the slowest 1% of 200 are those two.
    expect(tail.n).toBe(2)
    expect(tail.wholeP50Ms).toBe(11)
    expect(tail.wholeP99Ms).toBe(11)
    expect(tail.excessMs).toBe((5 + 9) / 2)
    expect(tail.stages).toEqual([
      { stage: "store", span: false, excessMs: 9 / 2 },
      { stage: "store (in worker)", span: true, excessMs: 8 / 2 },
      { stage: "auth", span: false, excessMs: 5 / 2 }
    ])
    tl.reset()
    expect(tl.tail()).toBeUndefined()
  })

  it("is off unless TOLLGATE_TIMELINE=1: marks record nothing", () => {
    expect(process.env.TOLLGATE_TIMELINE).toBeUndefined()
    timeline.begin()
    timeline.mark("auth")
    timeline.end("write")
    expect(timeline.on).toBe(false)
    expect(timeline.report()).toEqual([])
    expect(timeline.tail()).toBeUndefined()
  })
})
