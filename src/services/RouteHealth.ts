/**
 * Per-route circuit breaker (closed → open → half-open): `threshold` consecutive retryable failures
 * (5xx, 429, timeouts, connect errors) open a route for `openMs`; after that ONE probe request is let
 * through, and its outcome closes the route or opens it again. A 4xx caused by the client's request
 * says nothing about the route's health and counts as a success.
 */
export interface BreakerState {
  readonly failures: number
  readonly openedAt: number | undefined
  readonly probing: boolean
}

export const closed: BreakerState = { failures: 0, openedAt: undefined, probing: false }

export type Admission = "closed" | "probe" | "open"

export const admission = (s: BreakerState, now: number, openMs: number): Admission =>
  s.openedAt === undefined ? "closed" : now - s.openedAt < openMs || s.probing ? "open" : "probe"

export const onAdmit = (s: BreakerState, a: Admission): BreakerState => (a === "probe" ? { ...s, probing: true } : s)

export const onSuccess = (_: BreakerState): BreakerState => closed

export const onFailure = (s: BreakerState, now: number, threshold: number): BreakerState => {
  const failures = s.failures + 1
  if (s.probing) return { failures, openedAt: now, probing: false }
  return failures >= threshold ? { failures, openedAt: s.openedAt ?? now, probing: false } : { ...s, failures }
}

/** The probe ended without telling anything about the route (e.g. interrupted): allow another. */
export const onAbandon = (s: BreakerState): BreakerState => (s.probing ? { ...s, probing: false } : s)

export const describe = (s: BreakerState, now: number, openMs: number): "closed" | "open" | "half_open" =>
  s.openedAt === undefined ? "closed" : now - s.openedAt < openMs ? "open" : "half_open"
