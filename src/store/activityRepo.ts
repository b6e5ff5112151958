/**
 * The Activity service's reads (src/services/Activity.ts): the request log searched and paged, a
 * request, a receipt and its neighbours in the chain, each key's last use, and usage per UTC day —
 * read-only queries over the tables the governed call writes; the day in each engine's words.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { RequestRow as StoredRequest } from "./requestStatements.ts"

/** A request as the log lists it. */
export type RequestRow = StoredRequest & { readonly key_id: string }

export interface RequestFilter {
  readonly projectId: string
  readonly environment?: string | undefined
  readonly status?: string | undefined
  readonly model?: string | undefined
  /** Matches a substring of the request id, idempotency key, receipt id, model or route. */
  readonly q?: string | undefined
  /** The last id of the previous page. */
  readonly cursor?: string | undefined
  readonly limit: number
}

/** A receipt's neighbour in its project's chain. */
export interface ChainLink {
  readonly seq: number
  readonly request_id: string
  readonly environment: string
  readonly hash: string
}

const likePattern = (q: string) => `%${q.replace(/[\\%_]/g, (c) => `\\${c}`)}%`

/** The statements; a service runs them (a store failure is a defect there). */
export const makeActivityRepo = (sql: SqlClient.SqlClient) => ({
  /** Up to `limit` requests matching `f`, newest first (by id: ids start with their creation time). */
  requests: (f: RequestFilter, limit: number) => {
    const where = [sql`project_id = ${f.projectId}`]
    if (f.environment !== undefined) where.push(sql`environment = ${f.environment}`)
    if (f.status !== undefined) where.push(sql`status = ${f.status}`)
    if (f.model !== undefined) where.push(sql`(model = ${f.model} OR route = ${f.model})`)
    if (f.cursor !== undefined) where.push(sql`id < ${f.cursor}`)
    if (f.q !== undefined && f.q.length > 0) {
      const like = likePattern(f.q)
      where.push(
        sql`(id LIKE ${like} ESCAPE '\\' OR idempotency_key LIKE ${like} ESCAPE '\\' OR receipt_id LIKE ${like} ESCAPE '\\'
             OR model LIKE ${like} ESCAPE '\\' OR route LIKE ${like} ESCAPE '\\')`
      )
    }
    return sql<RequestRow>`SELECT * FROM requests WHERE ${sql.and(where)} ORDER BY id DESC LIMIT ${limit}`
  },

  /** Request `id` of project `projectId` (any environment). */
  request: (projectId: string, id: string) => sql<RequestRow>`SELECT * FROM requests WHERE id = ${id} AND project_id = ${projectId}`,

  /** Request `requestId`'s receipt body, its place in the chain and its environment. */
  receipt: (projectId: string, requestId: string) =>
    sql<{ body: string; seq: number; environment: string }>`
      SELECT body, seq, environment FROM receipts WHERE request_id = ${requestId} AND project_id = ${projectId}`,

  /** The receipts just before and just after `seq` in project `projectId`'s chain. */
  neighbours: (projectId: string, seq: number) =>
    sql<ChainLink>`SELECT seq, request_id, environment, hash FROM receipts
                   WHERE project_id = ${projectId} AND seq IN (${seq - 1}, ${seq + 1})`,

  /** The newest request's time of each key of `keyIds`. */
  keysLastUsed: (projectId: string, keyIds: ReadonlyArray<string>) =>
    sql<{ key_id: string; at: number }>`SELECT key_id, MAX(created_at) AS at FROM requests
                                        WHERE project_id = ${projectId} AND ${sql.in("key_id", keyIds)} GROUP BY key_id`,

  /** Requests and credits per UTC day and route of window `period` (all environments, or one). */
  dailyUsage: (projectId: string, period: string, environment: string | undefined) => {
    const where = [sql`project_id = ${projectId}`, sql`period = ${period}`]
    if (environment !== undefined) where.push(sql`environment = ${environment}`)
    // The receipt's UTC day, in each engine's words.
    const dayOf = sql.onDialectOrElse({
      pg: () => sql.literal("to_char(to_timestamp(created_at / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"),
      orElse: () => sql.literal("strftime('%Y-%m-%d', created_at / 1000, 'unixepoch')")
    })
    return sql<{ day: string; model: string; requests: number; credits: number }>`
      SELECT ${dayOf} AS day, route AS model,
             COUNT(*) AS requests, SUM(credits_charged) AS credits
      FROM receipts WHERE ${sql.and(where)} GROUP BY day, route ORDER BY day, route`
  }
})

export class ActivityRepo extends Effect.Service<ActivityRepo>()("tollgate/ActivityRepo", {
  effect: Effect.map(SqlClient.SqlClient, makeActivityRepo)
}) {}
