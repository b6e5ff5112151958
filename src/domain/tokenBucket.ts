/**
 * The tokens-per-minute limit (issue 41 item 3) as a token bucket, pure and in integers: a scope's
 * level is counted in UNITs (one token = 60,000 units, so a limit of `tpm` tokens a minute refills
 * exactly `tpm` units a millisecond), full at `tpm × UNIT`. A call takes its estimate at admission —
 * all of it, or nothing and a wait — and its settlement corrects the level by the difference with the
 * real count: given back (never over full) or taken (never below empty). The Redis script and the
 * PostgreSQL statement of src/store/sharedGcra.ts are this, step for step, on their store's clock.
 */
export const UNIT = 60_000

export interface Bucket {
  /** Units left, 0 ≤ level ≤ tpm × UNIT. */
  readonly level: number
  /** When `level` was last refilled (ms). */
  readonly at: number
}

/** A scope never seen, or idle a minute: full. */
export const fullBucket = (tpm: number, now: number): Bucket => ({ level: tpm * UNIT, at: now })

/** The bucket at `now`: refilled by the time since it was last, up to full (a clock going back refills nothing). */
export const refill = (b: Bucket | undefined, tpm: number, now: number): Bucket => {
  if (b === undefined) return fullBucket(tpm, now)
  const elapsed = Math.max(0, now - b.at)
  return { level: Math.min(tpm * UNIT, b.level + elapsed * tpm), at: Math.max(b.at, now) }
}

export type TakeDecision =
  | { readonly _tag: "Taken"; readonly bucket: Bucket; readonly remaining: number; readonly resetMs: number }
  /** `retryAfterMs`: when the estimate fits again; Infinity when it exceeds the whole limit. */
  | { readonly _tag: "Limited"; readonly remaining: number; readonly retryAfterMs: number; readonly resetMs: number }

/** Whole tokens left at `level`. */
export const tokensLeft = (level: number): number => Math.floor(level / UNIT)

/** Time until the bucket is full again (OpenAI's `x-ratelimit-reset-tokens`). */
export const untilFull = (level: number, tpm: number): number => Math.ceil((tpm * UNIT - level) / tpm)

/** Take `tokens` at `now` from a bucket of `tpm`: all of them, or none and how long to wait. */
export const take = (b: Bucket | undefined, tpm: number, tokens: number, now: number): TakeDecision => {
  const r = refill(b, tpm, now)
  const need = tokens * UNIT
  if (need > r.level) {
    const retryAfterMs = tokens > tpm ? Number.POSITIVE_INFINITY : Math.ceil((need - r.level) / tpm)
    return { _tag: "Limited", remaining: tokensLeft(r.level), retryAfterMs, resetMs: untilFull(r.level, tpm) }
  }
  const level = r.level - need
  return { _tag: "Taken", bucket: { level, at: r.at }, remaining: tokensLeft(level), resetMs: untilFull(level, tpm) }
}

/**
 * Settlement's correction at `now`: the call took `estimated` tokens and used `actual`. Gives back
 * the difference (never over full) or takes the excess (never below empty: a call already served is
 * never refused, the next ones wait).
 */
export const correct = (b: Bucket | undefined, tpm: number, estimated: number, actual: number, now: number): Bucket => {
  const r = refill(b, tpm, now)
  const level = Math.min(tpm * UNIT, Math.max(0, r.level + (estimated - actual) * UNIT))
  return { level, at: r.at }
}
