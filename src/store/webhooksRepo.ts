/**
 * Webhook endpoints and their deliveries (migration 0012; src/services/Webhooks.ts for the admin side,
 * src/services/WebhookWorker.ts for delivery). A delivery row is one event for one endpoint: it is
 * pending until an attempt is answered 2xx (delivered) or its retries run out (failed).
 *
 * Claims: a worker claims the due deliveries that head their endpoint's queue (no earlier pending
 * delivery to the same endpoint), so an endpoint's events go out one at a time, in `seq` order. On
 * PostgreSQL the claim is `FOR UPDATE SKIP LOCKED`: two instances never claim one delivery; a claim
 * holds until `claimed_until` (an instance that died is taken over when it passes) and an attempt's
 * outcome is written only by the claim's holder.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { type Position } from "./adminLists.ts"

export interface EndpointRow {
  readonly id: string
  readonly url: string
  readonly events: string
  readonly project_id: string | null
  readonly organization: string | null
  readonly description: string | null
  readonly secret: string
  readonly enabled: number
  readonly created_at: number
  readonly updated_at: number
}

export interface DeliveryRow {
  readonly seq: number
  readonly endpoint_id: string
  readonly event_id: string
  readonly status: "pending" | "delivered" | "failed"
  readonly attempts: number
  readonly last_status: number | null
  readonly last_error: string | null
  readonly last_latency_ms: number | null
  readonly last_attempt_at: number | null
  readonly next_attempt_at: number
  readonly delivered_at: number | null
  readonly created_at: number
}

/** A claimed delivery with what its attempt needs. */
export interface ClaimedDelivery extends DeliveryRow {
  readonly url: string
  readonly secret: string
  readonly event_type: string
  readonly event_data: string
  readonly event_created_at: number
}

/** An attempt's outcome, written by the claim's holder. */
export interface AttemptOutcome {
  readonly status: DeliveryRow["status"]
  readonly lastStatus: number | null
  readonly lastError: string | null
  readonly latencyMs: number
  readonly at: number
  readonly nextAttemptAt: number
}

export type EndpointFields = Pick<EndpointRow, "url" | "events" | "description" | "enabled" | "updated_at">

export const makeWebhooksRepo = (sql: SqlClient.SqlClient) => {
  /** The due deliveries at the head of their endpoint's queue, oldest first, not claimed by a live claim. */
  const due = (now: number, limit: number) => sql`
    SELECT d.seq FROM webhook_deliveries d
    WHERE d.status = 'pending' AND d.next_attempt_at <= ${now} AND (d.claimed_until IS NULL OR d.claimed_until <= ${now})
      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries e WHERE e.endpoint_id = d.endpoint_id AND e.status = 'pending' AND e.seq < d.seq)
    ORDER BY d.seq LIMIT ${limit}`
  return {
    withTransaction: sql.withTransaction,

    project: (id: string) => sql<{ id: string }>`SELECT id FROM projects WHERE id = ${id}`,

    insertEndpoint: (row: EndpointRow) => sql`INSERT INTO webhook_endpoints ${sql.insert({ ...row })}`,

    findEndpoint: (id: string) => sql<EndpointRow>`SELECT * FROM webhook_endpoints WHERE id = ${id}`,

    updateEndpoint: (id: string, f: EndpointFields) =>
      sql`UPDATE webhook_endpoints SET url = ${f.url}, events = ${f.events}, description = ${f.description}, enabled = ${f.enabled}, updated_at = ${f.updated_at}
          WHERE id = ${id}`,

    setSecret: (id: string, secret: string, now: number) =>
      sql<{ id: string }>`UPDATE webhook_endpoints SET secret = ${secret}, updated_at = ${now} WHERE id = ${id} RETURNING id`,

    /** An endpoint and its delivery log, gone in one transaction. */
    deleteEndpoint: (id: string) =>
      sql.withTransaction(
        Effect.zipRight(sql`DELETE FROM webhook_deliveries WHERE endpoint_id = ${id}`, sql<{ id: string }>`DELETE FROM webhook_endpoints WHERE id = ${id} RETURNING id`)
      ),

    endpointPosition: (id: string) => sql<Position>`SELECT created_at, id FROM webhook_endpoints WHERE id = ${id}`,

    endpoints: (position: Position | undefined, limit: number) =>
      sql<EndpointRow>`SELECT * FROM webhook_endpoints WHERE ${sql.and(position === undefined ? [] : [sql`(created_at, id) > (${position.created_at}, ${position.id})`])}
        ORDER BY created_at, id LIMIT ${limit}`,

    /** Up to `limit` of an endpoint's deliveries, newest first, before seq `before`. */
    deliveries: (endpointId: string, before: number | undefined, limit: number) =>
      sql<DeliveryRow & { event_type: string }>`SELECT d.*, v.type AS event_type FROM webhook_deliveries d JOIN events v ON v.id = d.event_id
        WHERE ${sql.and([sql`d.endpoint_id = ${endpointId}`, ...(before === undefined ? [] : [sql`d.seq < ${before}`])])}
        ORDER BY d.seq DESC LIMIT ${limit}`,

    delivery: (endpointId: string, seq: number) =>
      sql<DeliveryRow & { event_type: string }>`SELECT d.*, v.type AS event_type FROM webhook_deliveries d JOIN events v ON v.id = d.event_id
        WHERE d.endpoint_id = ${endpointId} AND d.seq = ${seq}`,

    /** "Send again": a new delivery of the same event to the same endpoint, due now, at the end of its queue. */
    retry: (endpointId: string, seq: number, now: number) =>
      sql<{ seq: number }>`INSERT INTO webhook_deliveries (endpoint_id, event_id, status, next_attempt_at, created_at)
        SELECT endpoint_id, event_id, 'pending', ${now}, ${now} FROM webhook_deliveries WHERE endpoint_id = ${endpointId} AND seq = ${seq}
        RETURNING seq`,

    /**
     * Claim up to `limit` due deliveries for `token` until `until`, and read what their attempts need.
     * PostgreSQL: the rows locked with SKIP LOCKED, so a concurrent claimer passes over them.
     */
    claim: (token: string, now: number, until: number, limit: number) =>
      Effect.flatMap(
        sql.onDialectOrElse({
          pg: () =>
            sql<{ seq: number }>`WITH c AS (${due(now, limit)} FOR UPDATE SKIP LOCKED)
              UPDATE webhook_deliveries w SET claimed_by = ${token}, claimed_until = ${until} FROM c WHERE w.seq = c.seq RETURNING w.seq`,
          orElse: () =>
            sql<{ seq: number }>`UPDATE webhook_deliveries SET claimed_by = ${token}, claimed_until = ${until} WHERE seq IN (${due(now, limit)}) RETURNING seq`
        }),
        (claimed) =>
          claimed.length === 0
            ? Effect.succeed([] as ReadonlyArray<ClaimedDelivery>)
            : sql<ClaimedDelivery>`SELECT d.*, e.url, e.secret, v.type AS event_type, v.data AS event_data, v.created_at AS event_created_at
                FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id JOIN events v ON v.id = d.event_id
                WHERE ${sql.in("d.seq", claimed.map((c) => c.seq))} AND d.claimed_by = ${token} ORDER BY d.seq`
      ),

    /** An attempt's outcome, only while `token` still holds the claim; the claim released (`claimed_by` kept: who made the last attempt). */
    complete: (seq: number, token: string, o: AttemptOutcome) =>
      sql`UPDATE webhook_deliveries SET status = ${o.status}, attempts = attempts + 1, last_status = ${o.lastStatus}, last_error = ${o.lastError},
            last_latency_ms = ${o.latencyMs}, last_attempt_at = ${o.at}, next_attempt_at = ${o.nextAttemptAt},
            delivered_at = ${o.status === "delivered" ? o.at : null}, claimed_until = NULL
          WHERE seq = ${seq} AND claimed_by = ${token}`,

    /**
     * The claims the earlier processes of instance `instanceId` left (they are dead: epoch `epoch` has
     * its id now); claims are marked `epoch:<n>`.
     */
    releaseEarlierClaims: (instanceId: string, epoch: number) =>
      sql`UPDATE webhook_deliveries SET claimed_by = NULL, claimed_until = NULL
        WHERE status = 'pending' AND claimed_by IN (SELECT ${"epoch:"} || CAST(epoch AS TEXT) FROM instances WHERE instance_id = ${instanceId} AND epoch < ${epoch})`,

    /** When the oldest undelivered delivery was created (null: none pending). */
    oldestPending: () => sql<{ oldest: number | null }>`SELECT MIN(created_at) AS oldest FROM webhook_deliveries WHERE status = 'pending'`
  }
}

export class WebhooksRepo extends Effect.Service<WebhooksRepo>()("tollgate/WebhooksRepo", {
  effect: Effect.map(SqlClient.SqlClient, makeWebhooksRepo)
}) {}
