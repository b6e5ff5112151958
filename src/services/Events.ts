/**
 * The events outbox's service side (issue 42; docs/contract.md "Webhooks"). Most events are written
 * by the transaction of their cause (the budget thresholds by the `budget_windows` trigger, the key
 * and project events by KeyRegistry and Projects); two are not:
 *
 * - `key.expired`: a rotated key's grace ends by the clock, not by a write. A sweep (every instance,
 *   every 5 s) writes it once per key: its cause is the key id, unique in the outbox, so instances
 *   and restarts racing on one key write one event.
 * - `budget.exhausted`: the first 402 of a window in a scope (the project's budget, a key's, an end
 *   user's; not a client's max_credits). A refusal is not a write, so the Gateway calls `exhausted`
 *   when the store refuses a reservation: the first time this process sees that scope's window, the
 *   event is written — committed — before the 402 is answered, so a 402 a client has seen never lacks
 *   its event, whatever crashes after; the scope's next 402s in this process write nothing (a set
 *   lookup). Keyed by scope and window in the outbox: at most one per scope and window, whatever the
 *   instances. A write that fails is logged and forgotten, so the window's next 402 tries again.
 */
import { Clock, Duration, Effect } from "effect"
import { InvalidRequest } from "../domain/errors.ts"
import { type Page, type PageRequest } from "../domain/paging.ts"
import { type EventRow, EventsRepo, type ExhaustedScope } from "../store/eventsRepo.ts"
import { BackgroundLane } from "./BackgroundLane.ts"

/** An event as the admin API answers it. */
export interface EventView {
  readonly id: string
  readonly object: "event"
  readonly type: string
  readonly project_id: string | null
  readonly organization: string | null
  readonly created_at: string
  readonly data: unknown
}

export const EVENT_TYPES = ["budget.threshold_reached", "budget.exhausted", "key.created", "key.rotated", "key.revoked", "key.expired", "project.updated"] as const

const toView = (r: EventRow): EventView => ({
  id: r.id,
  object: "event",
  type: r.type,
  project_id: r.project_id,
  organization: r.organization,
  created_at: new Date(Number(r.created_at)).toISOString(),
  data: JSON.parse(r.data)
})

/** Windows told about already in this process (bounded: the oldest forgotten first). */
const MAX_SEEN = 10_000

export class Events extends Effect.Service<Events>()("tollgate/Events", {
  scoped: Effect.gen(function* () {
    const repo = yield* EventsRepo
    // The sweep and the budget.exhausted writer are background work: their statements take the lane (src/services/BackgroundLane.ts).
    const lane = yield* BackgroundLane
    const seen = new Set<string>()

    /**
     * A reservation refused in `r.scope`: budget.exhausted once per scope and window, committed before
     * the caller answers the 402 (only the first refusal this process sees of a window waits for it).
     */
    const exhausted = (r: ExhaustedScope): Effect.Effect<void> => {
      const key = r.scope === "project" ? `${r.projectId}:${r.period}` : `${r.projectId}:${r.period}:${r.scope}:${r.scope === "key" ? r.keyId : r.endUser}`
      if (seen.has(key)) return Effect.void
      return Clock.currentTimeMillis.pipe(
        Effect.flatMap((now) => lane.run(repo.insertExhausted(r, now))),
        Effect.zipRight(Effect.sync(() => {
          seen.add(key)
          if (seen.size > MAX_SEEN) seen.delete(seen.values().next().value!)
        })),
        Effect.catchAllCause((c) => Effect.logWarning("events: budget.exhausted not written; the window's next 402 tries again", c))
      )
    }

    const sweepExpiredKeys = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const keys = yield* lane.run(repo.expiredKeys(now))
      for (const k of keys) {
        yield* lane.run(repo.insert({
          type: "key.expired",
          projectId: k.project_id,
          organization: k.organization,
          now,
          cause: `key.expired:${k.id}`,
          data: { key_id: k.id, project_id: k.project_id, environment: k.environment, replaced_by: k.replaced_by, expired_at: new Date(Number(k.expires_at)).toISOString() }
        }))
      }
    })

    yield* Effect.forkScoped(
      Effect.forever(Effect.zipRight(sweepExpiredKeys.pipe(Effect.catchAllCause((c) => Effect.logWarning("events: key expiry sweep failed", c))), Effect.sleep(Duration.seconds(5))))
    )

    /** A page of events, oldest first; `type` and `since` (ISO 8601) filter. The cursor is an event id. */
    const list = (type: string | undefined, since: string | undefined, request: PageRequest): Effect.Effect<Page<EventView>, InvalidRequest> =>
      Effect.gen(function* () {
        if (type !== undefined && !(EVENT_TYPES as ReadonlyArray<string>).includes(type)) {
          return yield* new InvalidRequest({ message: `type must be one of ${EVENT_TYPES.join(", ")}.`, param: "type" })
        }
        const sinceMs = since === undefined ? undefined : Date.parse(since)
        if (sinceMs !== undefined && (Number.isNaN(sinceMs) || !/^\d{4}-\d{2}-\d{2}/.test(since!))) {
          return yield* new InvalidRequest({ message: "since must be an ISO 8601 instant, e.g. 2026-11-01T00:00:00Z.", param: "since" })
        }
        let after: number | undefined
        if (request.cursor !== undefined) {
          const [position] = yield* Effect.orDie(repo.position(request.cursor))
          if (position === undefined) return yield* new InvalidRequest({ message: `cursor ${request.cursor} is not an item of this list; pass a page's next_cursor.`, param: "cursor" })
          after = Number(position.seq)
        }
        const rows = yield* Effect.orDie(repo.page(type, sinceMs, after, request.limit + 1))
        const page = rows.slice(0, request.limit)
        const hasMore = rows.length > request.limit
        return { data: page.map(toView), has_more: hasMore, next_cursor: hasMore ? page[page.length - 1]!.id : null }
      })

    return { exhausted, list, sweepExpiredKeys } as const
  }),
  dependencies: [EventsRepo.Default, BackgroundLane.Default]
}) {}
