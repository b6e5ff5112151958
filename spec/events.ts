/**
 * Events and webhooks as rules (issue 42, DESIGN §10). Pure: the store's triggers and the delivery
 * worker are checked against these in test/webhooks/.
 *
 * Thresholds: a project lists whole percents of its cap (`alert_thresholds_percent`, default
 * [50, 80, 100]). A settlement that moves a window's `spent` from `before` to `after` crosses percent
 * t of cap c when `before * 100 < t * c <= after * 100` (exact in integers; a cap of 0 crosses
 * nothing). Each threshold is emitted at most once per window and scope: what the window has emitted
 * already is never emitted again, whatever the order and grouping of the settlements, and a window
 * whose `spent` ends at s has emitted exactly the thresholds t with t * c <= s * 100 (when its spent
 * only grew and the cap did not change).
 *
 * Retries: attempt n (1 = the first retry) waits `base * 2^(n-1)` capped at `cap`, scaled by a
 * jitter factor in [0.5, 1.5); a delivery whose next attempt would start `maxAgeMs` or more after
 * it was created is marked failed instead.
 */

export const DEFAULT_THRESHOLDS: ReadonlyArray<number> = [50, 80, 100]

/** The thresholds crossed when spent moves from `before` to `after` under cap `cap`, ascending. */
export const crossedThresholds = (before: number, after: number, cap: number, thresholds: ReadonlyArray<number>): Array<number> =>
  cap <= 0 ? [] : [...new Set(thresholds)].filter((t) => before * 100 < t * cap && t * cap <= after * 100).sort((a, b) => a - b)

/**
 * Whether a move of spent from `before` to `after` passed a whole percent of cap `cap`: ⌊after·100/c⌋ >
 * ⌊before·100/c⌋. Some whole-percent threshold is crossed by the move exactly when this holds (t ≤
 * after·100/c ⟺ t ≤ ⌊after·100/c⌋, and t > before·100/c ⟺ t ≥ ⌊before·100/c⌋ + 1), so a store may
 * skip looking at the thresholds when it does not (PostgreSQL's triggers, migration 0027).
 */
export const wholePercentPassed = (before: number, after: number, cap: number): boolean =>
  cap > 0 && Math.floor((after * 100) / cap) > Math.floor((before * 100) / cap)

/** The thresholds a window emits over a run of settlements (spent after each), each once: the union of the crossings. */
export const emittedOverRun = (spents: ReadonlyArray<number>, cap: number, thresholds: ReadonlyArray<number>): Array<number> => {
  const seen = new Set<number>()
  let before = 0
  for (const after of spents) {
    if (after > before) for (const t of crossedThresholds(before, after, cap, thresholds)) seen.add(t)
    before = after
  }
  return [...seen].sort((a, b) => a - b)
}

/** A project's thresholds as an admin may set them: 1 to 10 whole percents, each 1..100 (spent never passes the cap), no repeats. */
export const validThresholds = (value: unknown): value is ReadonlyArray<number> =>
  Array.isArray(value) &&
  value.length >= 1 &&
  value.length <= 10 &&
  value.every((t) => Number.isInteger(t) && t >= 1 && t <= 100) &&
  new Set(value).size === value.length

export interface RetryPolicy {
  readonly baseMs: number
  readonly capMs: number
  readonly maxAgeMs: number
}

/** Three days of retries, the first after 5 s, none more than 6 h apart. */
export const DEFAULT_RETRY: RetryPolicy = { baseMs: 5_000, capMs: 6 * 3600_000, maxAgeMs: 3 * 24 * 3600_000 }

/** The wait before retry `attempt` (1-based), jitter `u` in [0, 1). */
export const retryDelay = (policy: RetryPolicy, attempt: number, u: number): number => {
  const exp = Math.min(policy.capMs, policy.baseMs * 2 ** Math.min(attempt - 1, 40))
  return Math.max(1, Math.floor(exp * (0.5 + u)))
}

/** After a failed attempt `attempt` at `now` of a delivery created at `createdAt`: when to try again, or "failed". */
export const nextAttempt = (policy: RetryPolicy, createdAt: number, now: number, attempt: number, u: number): number | "failed" => {
  const at = now + retryDelay(policy, attempt, u)
  return at - createdAt >= policy.maxAgeMs ? "failed" : at
}
