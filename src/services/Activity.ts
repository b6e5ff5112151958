/**
 * What the dashboard reads about a project's traffic (issue 17): the request log searched and paged,
 * each key's last use, usage per day and model, and a receipt with its neighbours in the chain.
 * Read-only queries over the tables the governed call writes; nothing here is on the chat path.
 *
 * The request log is paged newest first by request id: ids start with their creation time
 * (src/domain/ids.ts), so `id < cursor` on the primary key is a stable keyset cursor.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { Receipt } from "../../spec/receipt.ts"
import { RequestNotFound } from "../domain/errors.ts"
import { pageOf } from "../domain/paging.ts"
import { type RequestRow as StoredRequest, requestView } from "../store/requestStatements.ts"

type RequestRow = StoredRequest & { readonly key_id: string }

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

export const requestListItem = (r: RequestRow) => ({ ...requestView(r), environment: r.environment, key_id: r.key_id, idempotency_key: r.idempotency_key })

/** A receipt's neighbour in its project's chain. */
export interface ChainLink {
  readonly seq: number
  readonly request_id: string
  readonly environment: string
  readonly hash: string
}

const likePattern = (q: string) => `%${q.replace(/[\\%_]/g, (c) => `\\${c}`)}%`

export class Activity extends Effect.Service<Activity>()("tollgate/Activity", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    const listRequests = (f: RequestFilter) =>
      Effect.gen(function* () {
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
        const rows = yield* sql<RequestRow>`SELECT * FROM requests WHERE ${sql.and(where)} ORDER BY id DESC LIMIT ${f.limit + 1}`
        return pageOf(rows, f.limit, requestListItem)
      }).pipe(Effect.orDie)

    const findRequest = (projectId: string, id: string, environment: string | undefined) =>
      Effect.flatMap(
        sql<RequestRow>`SELECT * FROM requests WHERE id = ${id} AND project_id = ${projectId}`.pipe(Effect.orDie),
        (rows) =>
          rows[0] === undefined || (environment !== undefined && rows[0].environment !== environment)
            ? Effect.fail(new RequestNotFound({ message: `No request with id ${id} in this project${environment === undefined ? "" : " and environment"}.` }))
            : Effect.succeed(requestListItem(rows[0]))
      )

    /** A request's receipt with the receipts before and after it in the project's chain. */
    const receipt = (projectId: string, requestId: string, environment: string | undefined) =>
      Effect.gen(function* () {
        const rows = yield* sql<{ body: string; seq: number; environment: string }>`
          SELECT body, seq, environment FROM receipts WHERE request_id = ${requestId} AND project_id = ${projectId}`.pipe(Effect.orDie)
        const row = rows[0]
        if (row === undefined || (environment !== undefined && row.environment !== environment)) {
          return yield* new RequestNotFound({ message: `No settled request with id ${requestId} in this project${environment === undefined ? "" : " and environment"}.` })
        }
        const links = yield* sql<ChainLink>`SELECT seq, request_id, environment, hash FROM receipts
                                            WHERE project_id = ${projectId} AND seq IN (${row.seq - 1}, ${row.seq + 1})`.pipe(Effect.orDie)
        const link = (seq: number) => links.find((l) => l.seq === seq) ?? null
        return { object: "receipt_view" as const, receipt: JSON.parse(row.body) as Receipt, previous: link(row.seq - 1), next: link(row.seq + 1) }
      })

    /** When each of a project's keys `keyIds` (a page of them) last made a governed request (the request log's newest row per key). */
    const keysLastUsed = (projectId: string, keyIds: ReadonlyArray<string>) =>
      Effect.map(
        sql<{ key_id: string; at: number }>`SELECT key_id, MAX(created_at) AS at FROM requests
                                            WHERE project_id = ${projectId} AND ${sql.in("key_id", keyIds)} GROUP BY key_id`,
        (rows) => new Map(rows.map((r) => [r.key_id, new Date(r.at).toISOString()]))
      ).pipe(Effect.orDie)

    /**
     * Credits and requests per UTC day and model for one window, summed over its receipts (all
     * environments, or one), with the window's total: with every environment it equals the
     * window's `spent`, which is posted in the same transaction as each receipt.
     */
    const dailyUsage = (projectId: string, period: string, environment: string | undefined) =>
      Effect.gen(function* () {
        const where = [sql`project_id = ${projectId}`, sql`period = ${period}`]
        if (environment !== undefined) where.push(sql`environment = ${environment}`)
        // The receipt's UTC day, in each engine's words.
        const dayOf = sql.onDialectOrElse({
          pg: () => sql.literal("to_char(to_timestamp(created_at / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"),
          orElse: () => sql.literal("strftime('%Y-%m-%d', created_at / 1000, 'unixepoch')")
        })
        const rows = yield* sql<{ day: string; model: string; requests: number; credits: number }>`
          SELECT ${dayOf} AS day, route AS model,
                 COUNT(*) AS requests, SUM(credits_charged) AS credits
          FROM receipts WHERE ${sql.and(where)} GROUP BY day, route ORDER BY day, route`
        const days = rows.map((r) => ({ date: r.day, model: r.model, requests: Number(r.requests), credits: Number(r.credits) }))
        return {
          days,
          receipts: days.reduce((n, d) => n + d.requests, 0),
          receipts_credits: days.reduce((n, d) => n + d.credits, 0)
        }
      }).pipe(Effect.orDie)

    return { listRequests, findRequest, receipt, keysLastUsed, dailyUsage } as const
  })
}) {}
