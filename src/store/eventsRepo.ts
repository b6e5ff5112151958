/**
 * The events outbox's rows (`events`, migration 0012; docs/contract.md "Webhooks"): the INSERT a
 * causing transaction makes (its fan-out to the webhook deliveries is the table's trigger, in the same
 * transaction), the list the admin API reads, and the key-expiry sweep. Budget thresholds are written
 * by the `budget_windows` trigger, not here.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { randomBase32 } from "../domain/ids.ts"

/** The scope a 402 named, in the window of the refused call (`budget.exhausted`, issue 41's scopes). */
export type ExhaustedScope =
  | { readonly scope: "project"; readonly projectId: string; readonly period: string }
  | { readonly scope: "key"; readonly projectId: string; readonly keyId: string; readonly period: string }
  | { readonly scope: "end_user"; readonly projectId: string; readonly endUser: string; readonly period: string }

/** An event as stored (data as JSON text). */
export interface EventRow {
  readonly seq: number
  readonly id: string
  readonly type: string
  readonly project_id: string | null
  readonly organization: string | null
  readonly data: string
  readonly created_at: number
}

/** An event to write: `cause`, when given, makes it once per cause (a second insert writes nothing). */
export interface NewEvent {
  readonly type: string
  readonly projectId: string | null
  readonly organization: string | null
  readonly data: unknown
  readonly cause?: string | undefined
  readonly now: number
}

export const newEventId = (): string => `evt_${randomBase32(12)}`

/**
 * The INSERT of an event, to run inside the transaction of its cause (then the cause and the event
 * commit or roll back together). Answers the rows written: none when its cause was emitted already.
 */
export const insertEvent = (sql: SqlClient.SqlClient, e: NewEvent) =>
  sql<{ id: string }>`INSERT INTO events (id, type, project_id, organization, data, cause, created_at)
      VALUES (${newEventId()}, ${e.type}, ${e.projectId}, ${e.organization}, ${JSON.stringify(e.data)}, ${e.cause ?? null}, ${e.now})
      ON CONFLICT DO NOTHING RETURNING id`

export const makeEventsRepo = (sql: SqlClient.SqlClient) => ({
  insert: (e: NewEvent) => insertEvent(sql, e),

  /**
   * `budget.exhausted` for project `projectId`'s window `period`, with the window's figures as they
   * are now: once per project and window (its cause), whoever writes it first.
   */
  insertExhausted: (r: ExhaustedScope, now: number) => {
    // The scope's cap and window as the refusal found them (spec/scopes.ts: a key's cap; an end user's
    // override, else the project's default); the project's window is budget_windows, the others scope_windows.
    const scopeId = r.scope === "project" ? r.projectId : r.scope === "key" ? r.keyId : r.endUser
    const window = r.scope === "project" ? undefined : `${r.scope}:${r.scope === "key" ? r.keyId : `${r.projectId}/${r.endUser}`}`
    const cap = r.scope === "project"
      ? sql`p.budget_credits`
      : r.scope === "key"
        ? sql`(SELECT kc.budget_credits FROM api_keys kc WHERE kc.id = ${r.keyId})`
        : sql`CASE WHEN EXISTS (SELECT 1 FROM end_users eu WHERE eu.project_id = p.id AND eu.end_user = ${r.endUser})
               THEN (SELECT eu.budget_credits FROM end_users eu WHERE eu.project_id = p.id AND eu.end_user = ${r.endUser})
               ELSE p.end_user_budget_credits END`
    const spent = window === undefined ? sql`COALESCE(w.spent, 0)` : sql`COALESCE((SELECT sw.spent FROM scope_windows sw WHERE sw.scope = ${window} AND sw.period = ${r.period}), 0)`
    const reserved = window === undefined ? sql`COALESCE(w.reserved, 0)` : sql`COALESCE((SELECT sw.reserved FROM scope_windows sw WHERE sw.scope = ${window} AND sw.period = ${r.period}), 0)`
    // The project's window keeps the cause it always had; a key's or an end user's names its scope.
    const cause = r.scope === "project" ? `budget.exhausted:${r.projectId}:${r.period}` : `budget.exhausted:${r.projectId}:${r.period}:${r.scope}:${scopeId}`
    return sql`INSERT INTO events (id, type, project_id, organization, data, cause, created_at)
        SELECT ${newEventId()}, ${"budget.exhausted"}, p.id, p.organization, ${sql.onDialectOrElse({
          pg: () => sql`json_build_object('scope', ${r.scope}::TEXT, 'scope_id', ${scopeId}::TEXT, 'period', ${r.period}::TEXT, 'cap', ${cap}, 'spent', ${spent}, 'reserved', ${reserved})::TEXT`,
          orElse: () => sql`json_object('scope', ${r.scope}, 'scope_id', ${scopeId}, 'period', ${r.period}, 'cap', ${cap}, 'spent', ${spent}, 'reserved', ${reserved})`
        })}, ${cause}, ${now}
        FROM projects p LEFT JOIN budget_windows w ON w.project_id = p.id AND w.period = ${r.period}
        WHERE p.id = ${r.projectId}
        ON CONFLICT DO NOTHING`
  },

  /** Event `id`'s position in the list (its seq). */
  position: (id: string) => sql<{ seq: number }>`SELECT seq FROM events WHERE id = ${id}`,

  /** Up to `limit` events after seq `after`, oldest first; of `type` and since `since` (ms) when given. */
  page: (type: string | undefined, since: number | undefined, after: number | undefined, limit: number) =>
    sql<EventRow>`SELECT seq, id, type, project_id, organization, data, created_at FROM events WHERE ${sql.and([
      ...(type === undefined ? [] : [sql`type = ${type}`]),
      ...(since === undefined ? [] : [sql`created_at >= ${since}`]),
      ...(after === undefined ? [] : [sql`seq > ${after}`])
    ])} ORDER BY seq LIMIT ${limit}`,

  /**
   * `key.expired` for every rotated key whose grace ended by `now` and was not revoked: once per key
   * (its cause is the key id; a key already emitted is skipped by the cause's unique index, so the
   * sweep can run on every instance and after every restart).
   */
  expiredKeys: (now: number) =>
    sql<{ id: string; project_id: string; organization: string; environment: string; expires_at: number; replaced_by: string | null }>`
      SELECT k.id, k.project_id, p.organization, k.environment, k.expires_at, k.replaced_by FROM api_keys k JOIN projects p ON p.id = k.project_id
      WHERE k.expires_at IS NOT NULL AND k.revoked_at IS NULL AND k.expires_at <= ${now}
        AND NOT EXISTS (SELECT 1 FROM events e WHERE e.cause = ${"key.expired:"} || k.id)
      ORDER BY k.expires_at LIMIT 100`
})

export class EventsRepo extends Effect.Service<EventsRepo>()("tollgate/EventsRepo", {
  effect: Effect.map(SqlClient.SqlClient, makeEventsRepo)
}) {}
