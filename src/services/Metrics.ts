/**
 * Prometheus metrics (GET /metrics), kept in plain maps: recording is a map update on the hot path,
 * rendering happens only when scraped. Labels are bounded: endpoint, status, route, outcome, project.
 */
import { Effect } from "effect"
import { pgReserveBatches, pgRetries, pgSettleBatches, pgShed, pgTurns } from "../store/pgChatStore.ts"
import { pgRoundTrips } from "../store/pgPool.ts"
import { rateLimitFallbacks } from "./RateLimiter.ts"
import { webhookStats } from "./WebhookWorker.ts"

const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60] as const

const escape = (v: string) => v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")
const render = (labels: Record<string, string>) => {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${escape(v)}"`)
  return parts.length === 0 ? "" : `{${parts.join(",")}}`
}
/**
 * The rendered label set, memoised: the hot path records each request under a handful of label
 * sets, so it should not escape and join them every time. Labels are bounded (see above), so is this.
 */
const rendered = new Map<string, string>()
const labelsOf = (labels: Record<string, string>) => {
  let raw = ""
  for (const k in labels) raw += `${k}\u0000${labels[k]}\u0001`
  let key = rendered.get(raw)
  if (key === undefined) {
    key = render(labels)
    rendered.set(raw, key)
  }
  return key
}

class Counter {
  readonly values = new Map<string, number>()
  constructor(readonly name: string, readonly help: string) {}
  inc(labels: Record<string, string>, by = 1) {
    const key = labelsOf(labels)
    this.values.set(key, (this.values.get(key) ?? 0) + by)
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`]
    for (const [k, v] of this.values) lines.push(`${this.name}${k} ${v}`)
    return lines.join("\n")
  }
}

class Histogram {
  readonly series = new Map<string, { labels: Record<string, string>; counts: Array<number>; sum: number; count: number }>()
  constructor(readonly name: string, readonly help: string) {}
  observe(labels: Record<string, string>, seconds: number) {
    const key = labelsOf(labels)
    let s = this.series.get(key)
    if (s === undefined) {
      s = { labels, counts: BUCKETS.map(() => 0), sum: 0, count: 0 }
      this.series.set(key, s)
    }
    for (let i = 0; i < BUCKETS.length; i++) if (seconds <= BUCKETS[i]!) s.counts[i]!++
    s.sum += seconds
    s.count++
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`]
    for (const s of this.series.values()) {
      BUCKETS.forEach((b, i) => lines.push(`${this.name}_bucket${labelsOf({ ...s.labels, le: String(b) })} ${s.counts[i]}`))
      lines.push(`${this.name}_bucket${labelsOf({ ...s.labels, le: "+Inf" })} ${s.count}`)
      lines.push(`${this.name}_sum${labelsOf(s.labels)} ${s.sum}`)
      lines.push(`${this.name}_count${labelsOf(s.labels)} ${s.count}`)
    }
    return lines.join("\n")
  }
}

/** A counter kept outside this service (by the store, the rate limiter): its HELP and TYPE lines, then one line per label set. */
const external = (name: string, help: string, values: ReadonlyArray<readonly [labels: string, value: number]>): string =>
  [`# HELP ${name} ${help}`, `# TYPE ${name} counter`, ...values.map(([labels, value]) => `${name}${labels} ${value}`)].join("\n")

/** The store's and the rate limiter's own counters (zero on SQLite where they are PostgreSQL's). */
const renderStoreRetries = (): string =>
  [
    external("tollgate_store_retries_total", "Store transactions retried after a serialization failure (40001) or a deadlock (40P01).", [
      ['{reason="serialization_failure"}', pgRetries["40001"]],
      ['{reason="deadlock"}', pgRetries["40P01"]]
    ]),
    external("tollgate_store_round_trips_total", "Statements sent to PostgreSQL, each one round trip (zero on SQLite).", [["", pgRoundTrips.roundTrips]]),
    external("tollgate_store_checkouts_total", "Connections taken from the PostgreSQL pool: one a transaction, one a plain statement (zero on SQLite).", [["", pgRoundTrips.checkouts]]),
    external("tollgate_store_settle_batches_total", "Group-committed settlement statements sent to PostgreSQL, each one transaction and one WAL flush (zero on SQLite).", [["", pgSettleBatches.batches]]),
    external("tollgate_store_batched_settlements_total", "Settlements those statements carried: divided by the batches, the mean batch size.", [["", pgSettleBatches.settlements]]),
    external("tollgate_store_batch_splits_total", "Batches (of settlements or reservations) the database refused and that were split, each call run alone.", [["", pgSettleBatches.splits]]),
    external("tollgate_store_head_moved_total", "Settlement statements that found a receipt chain head another instance had moved, and sealed their batch again (zero on SQLite).", [["", pgSettleBatches.headMoved]]),
    external("tollgate_store_chain_locked_total", "Settlement batches of a contended project sealed under their chains' writer lock, on the heads read under it (zero on SQLite).", [["", pgSettleBatches.locked]]),
    external("tollgate_store_settlements_requeued_total", "Settlements put back in their lane's queue once after a chain head they were sealed on had moved, sealed again in the lane's next turn (zero on SQLite).", [["", pgSettleBatches.requeued]]),
    external("tollgate_store_reserve_batches_total", "Reservation statements sent to PostgreSQL that answered, each one transaction (zero on SQLite).", [["", pgReserveBatches.batches]]),
    external("tollgate_store_batched_reservations_total", "Reservations those statements carried: divided by the batches, the mean batch size.", [["", pgReserveBatches.reservations]]),
    external("tollgate_store_turns_total", "Lane turns that carried settlements and reservations in one PostgreSQL statement, one commit (counted in both batch totals too; zero on SQLite).", [["", pgTurns.turns]]),
    external("tollgate_store_shed_total", "Reservations refused 503 server_overloaded before anything was held, by the bound that shed them (zero on SQLite).", [
      ['{bound="queued"}', pgShed.queued],
      ['{bound="waited"}', pgShed.waited],
      ['{bound="lock"}', pgShed.lock]
    ]),
    external("tollgate_webhook_attempts_total", "Webhook delivery attempts by outcome: delivered (2xx), retry (failed, tried again later), failed (retries ran out).", [
      ['{outcome="delivered"}', webhookStats.outcomes.delivered],
      ['{outcome="retry"}', webhookStats.outcomes.retry],
      ['{outcome="failed"}', webhookStats.outcomes.failed]
    ]),
    `# HELP tollgate_webhook_outbox_oldest_age_seconds Age of the oldest undelivered webhook delivery at the worker's last round (0: none pending).\n# TYPE tollgate_webhook_outbox_oldest_age_seconds gauge\ntollgate_webhook_outbox_oldest_age_seconds ${webhookStats.oldestPendingAgeSeconds}`,
    external("tollgate_rate_limit_fallback_total", "Admissions decided by the instance's share of the limit because Redis could not answer.", [["", rateLimitFallbacks.count]])
  ].join("\n")

export class Metrics extends Effect.Service<Metrics>()("tollgate/Metrics", {
  sync: () => {
    const requests = new Counter("tollgate_http_requests_total", "HTTP requests by endpoint and status.")
    const duration = new Histogram("tollgate_http_request_duration_seconds", "Time to the response head (streams: to the first byte) by endpoint.")
    const credits = new Counter("tollgate_credits_charged_total", "Credits charged, by project.")
    const settled = new Counter("tollgate_requests_settled_total", "Governed requests settled with a receipt, by project and usage source.")
    const attempts = new Counter("tollgate_upstream_attempts_total", "Upstream attempts by route and outcome.")
    const authFailures = new Counter("tollgate_auth_failures_total", "Failed dashboard sign-ins and admin-token checks, by surface (sign_in, admin_token).")
    const authThrottled = new Counter("tollgate_auth_throttled_total", "Sign-ins and admin-token checks answered 429 before their credential was checked, by surface and the limit that refused (address, project_key, admin_token).")
    const violations = new Counter(
      "tollgate_lifecycle_violations_total",
      "Governed calls that broke their lifecycle (a move it does not allow, a second answer): a bug of the gateway's, by kind (move, answer). Alert on any."
    )
    for (const surface of ["sign_in", "admin_token"]) authFailures.inc({ surface }, 0)
    for (const kind of ["move", "answer"]) violations.inc({ kind }, 0)
    return {
      request: (endpoint: string, status: number, seconds: number) => {
        requests.inc({ endpoint, status: String(status) })
        duration.observe({ endpoint }, seconds)
      },
      settled: (projectId: string, source: string, charged: number) => {
        settled.inc({ project: projectId, usage_source: source })
        credits.inc({ project: projectId }, charged)
      },
      attempt: (route: string, outcome: string) => attempts.inc({ route, outcome }),
      authFailure: (surface: string) => authFailures.inc({ surface }),
      authThrottled: (surface: string, limit: string) => authThrottled.inc({ surface, limit }),
      lifecycleViolation: (kind: "move" | "answer") => violations.inc({ kind }),
      render: (): string => [requests, duration, credits, settled, attempts, authFailures, authThrottled, violations].map((m) => m.render()).join("\n\n") + "\n\n" + renderStoreRetries() + "\n"
    } as const
  }
}) {}
