/**
 * RouteHealth: the per-route circuit breaker as a pure state machine.
 *   closed --threshold failures--> open --openMs--> half-open (one probe) --ok--> closed
 *                                                                       --fail--> open again
 */
import { describe, expect, it } from "@effect/vitest"
import * as Health from "../../src/services/RouteHealth.ts"

const THRESHOLD = 3
const OPEN_MS = 1_000

/** `n` consecutive failures at the given instants, from closed. */
const failures = (...at: ReadonlyArray<number>): Health.BreakerState =>
  at.reduce((s, now) => Health.onFailure(s, now, THRESHOLD), Health.closed)

describe("RouteHealth", () => {
  it("stays closed below the threshold and opens at it, remembering when", () => {
    const two = failures(10, 20)
    expect(two).toEqual({ failures: 2, openedAt: undefined, probing: false })
    expect(Health.admission(two, 20, OPEN_MS)).toBe("closed")
    const three = Health.onFailure(two, 30, THRESHOLD)
    expect(three).toEqual({ failures: 3, openedAt: 30, probing: false })
    expect(Health.describe(three, 30, OPEN_MS)).toBe("open")
  })

  it("a success resets the failure count", () => {
    const s = Health.onSuccess(failures(1, 2))
    expect(s).toEqual(Health.closed)
    expect(Health.onFailure(Health.onFailure(s, 3, THRESHOLD), 4, THRESHOLD).openedAt).toBeUndefined()
  })

  it("refuses while open, then admits exactly one probe once openMs has passed", () => {
    const open = failures(0, 0, 100)
    expect(Health.admission(open, 100, OPEN_MS)).toBe("open")
    expect(Health.admission(open, 100 + OPEN_MS - 1, OPEN_MS)).toBe("open")
    expect(Health.admission(open, 100 + OPEN_MS, OPEN_MS)).toBe("probe")
    expect(Health.describe(open, 100 + OPEN_MS, OPEN_MS)).toBe("half_open")

    const probing = Health.onAdmit(open, "probe")
    expect(probing.probing).toBe(true)
    // A second request while the probe is out is refused.
    expect(Health.admission(probing, 100 + OPEN_MS + 5, OPEN_MS)).toBe("open")
    // Admitting on a closed route changes nothing.
    expect(Health.onAdmit(Health.closed, "closed")).toBe(Health.closed)
  })

  it("a successful probe closes the route", () => {
    const probing = Health.onAdmit(failures(0, 0, 0), "probe")
    const closed = Health.onSuccess(probing)
    expect(closed).toEqual(Health.closed)
    expect(Health.admission(closed, OPEN_MS, OPEN_MS)).toBe("closed")
    expect(Health.describe(closed, OPEN_MS, OPEN_MS)).toBe("closed")
  })

  it("a failed probe re-opens the route from the probe's instant", () => {
    const probing = Health.onAdmit(failures(0, 0, 0), "probe")
    const reopened = Health.onFailure(probing, 5_000, THRESHOLD)
    expect(reopened).toEqual({ failures: 4, openedAt: 5_000, probing: false })
    expect(Health.admission(reopened, 5_000 + OPEN_MS - 1, OPEN_MS)).toBe("open")
    expect(Health.admission(reopened, 5_000 + OPEN_MS, OPEN_MS)).toBe("probe")
  })

  it("late failures of requests admitted before the route opened keep the original openedAt", () => {
    const open = failures(0, 0, 100)
    expect(Health.onFailure(open, 900, THRESHOLD)).toEqual({ failures: 4, openedAt: 100, probing: false })
  })

  it("an abandoned probe lets another probe through; abandoning outside a probe changes nothing", () => {
    const open = failures(0, 0, 0)
    const probing = Health.onAdmit(open, "probe")
    const abandoned = Health.onAbandon(probing)
    expect(abandoned.probing).toBe(false)
    expect(Health.admission(abandoned, OPEN_MS, OPEN_MS)).toBe("probe")
    expect(Health.onAbandon(open)).toBe(open)
  })
})
