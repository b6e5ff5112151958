/**
 * Instance epochs (docs/contract.md §4): which epochs are alive and which are known dead. Every
 * process that opens the store takes an epoch and refreshes its heartbeat while it lives; the
 * recovery (src/services/Recovery.ts) resolves the calls in flight of the epochs known dead, and the
 * shared rate limit's fallback divides the limit among the live ones (src/store/epochStore.ts
 * `liveCount`, whose SQL keeps only the bound `oldestLiveHeartbeat`). Pure functions, no I/O.
 */

export interface EpochFacts {
  readonly epoch: number
  readonly instanceId: string
  /** The last heartbeat (ms UTC). */
  readonly heartbeatAt: number
  /** When it stopped cleanly (ms UTC), or null while it runs (or died). */
  readonly stoppedAt: number | null
}

/** An epoch whose heartbeat is older than this is dead: ten beats missed, and never under 10 s. */
export const staleAfterMs = (heartbeatMs: number): number => Math.max(10_000, 10 * heartbeatMs)

/** The oldest heartbeat a live epoch can have at `now`. */
export const oldestLiveHeartbeat = (now: number, staleMs: number): number => now - staleMs

/** Alive at `now`: not stopped, and its heartbeat no older than `staleMs`. */
export const isLiveEpoch = (e: Pick<EpochFacts, "heartbeatAt" | "stoppedAt">, now: number, staleMs: number): boolean =>
  e.stoppedAt === null && e.heartbeatAt >= oldestLiveHeartbeat(now, staleMs)

/**
 * Whether `other` is known dead to the process `me` at `now`: never `me`'s own epoch; an earlier
 * epoch of `me`'s instance id (this process holds that identity now); or any epoch not alive. So
 * several instances sharing one store never resolve each other's live calls, and a dead one's are
 * resolved by any survivor.
 */
export const isDeadEpoch = (other: EpochFacts, me: { readonly epoch: number; readonly instanceId: string }, now: number, staleMs: number): boolean =>
  other.epoch !== me.epoch && ((other.instanceId === me.instanceId && other.epoch < me.epoch) || !isLiveEpoch(other, now, staleMs))
