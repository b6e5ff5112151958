/**
 * Per-project rate limit as GCRA (generic cell rate algorithm), a pure function of time.
 *
 * A limit of `requestsPerMinute` with `burst` lets a quiet project send `burst` requests at once and
 * then one per emission interval T. Time is in integer microseconds and T is rounded UP, so over any
 * interval [0, t] the admitted requests never exceed burst + floor(t / T) ≤ burst + rate·t.
 *
 * State is one number per project: the theoretical arrival time (TAT) of the next request.
 */

export interface RateLimit {
  readonly requestsPerMinute: number
  readonly burst: number
}

/** Theoretical arrival time in µs; 0 for a project never seen. */
export type GcraState = number

export const MICROS_PER_MINUTE = 60_000_000

export const emissionIntervalMicros = (limit: RateLimit): number =>
  Math.ceil(MICROS_PER_MINUTE / Math.max(1, limit.requestsPerMinute))

export type GcraDecision =
  | {
      readonly _tag: "Allowed"
      readonly state: GcraState
      /** Requests that could still be sent right now. */
      readonly remaining: number
      /** µs until the bucket is full again. */
      readonly resetMicros: number
    }
  | {
      readonly _tag: "Limited"
      readonly state: GcraState
      /** µs until one request would be admitted. */
      readonly retryAfterMicros: number
      readonly resetMicros: number
    }

export const checkGcra = (state: GcraState, limit: RateLimit, nowMicros: number): GcraDecision => {
  const interval = emissionIntervalMicros(limit)
  const burst = Math.max(1, limit.burst)
  const tat = Math.max(state, nowMicros)
  const newTat = tat + interval
  const allowAt = newTat - burst * interval
  if (nowMicros < allowAt) {
    return {
      _tag: "Limited",
      state,
      retryAfterMicros: allowAt - nowMicros,
      resetMicros: tat - nowMicros
    }
  }
  return {
    _tag: "Allowed",
    state: newTat,
    remaining: Math.floor((nowMicros - allowAt) / interval),
    resetMicros: newTat - nowMicros
  }
}

/** The default burst when a project sets none: a tenth of a minute's worth, at least 1. */
export const defaultBurst = (requestsPerMinute: number): number => Math.max(1, Math.ceil(requestsPerMinute / 10))
