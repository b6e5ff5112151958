/**
 * What the dashboard reads about a project's traffic (issue 17): the request log searched and paged,
 * each key's last use, usage per day and model, and a receipt with its neighbours in the chain.
 * Read-only queries over the tables the governed call writes; nothing here is on the chat path.
 *
 * The request log is paged newest first by request id: ids start with their creation time
 * (src/domain/ids.ts), so `id < cursor` on the primary key is a stable keyset cursor.
 */
import { Effect } from "effect"
import type { Receipt } from "../../spec/receipt.ts"
import { RequestNotFound } from "../domain/errors.ts"
import { pageOf } from "../domain/paging.ts"
import { ActivityRepo, type RequestFilter, type RequestRow } from "../store/activityRepo.ts"
import { requestView } from "../store/requestStatements.ts"

export type { ChainLink, RequestFilter } from "../store/activityRepo.ts"

export const requestListItem = (r: RequestRow) => ({ ...requestView(r), environment: r.environment, key_id: r.key_id, idempotency_key: r.idempotency_key })

export class Activity extends Effect.Service<Activity>()("tollgate/Activity", {
  effect: Effect.gen(function* () {
    const repo = yield* ActivityRepo

    const listRequests = (f: RequestFilter) =>
      Effect.gen(function* () {
        const rows = yield* repo.requests(f, f.limit + 1)
        return pageOf(rows, f.limit, requestListItem)
      }).pipe(Effect.orDie)

    const findRequest = (projectId: string, id: string, environment: string | undefined) =>
      Effect.flatMap(
        repo.request(projectId, id).pipe(Effect.orDie),
        (rows) =>
          rows[0] === undefined || (environment !== undefined && rows[0].environment !== environment)
            ? Effect.fail(new RequestNotFound({ message: `No request with id ${id} in this project${environment === undefined ? "" : " and environment"}.` }))
            : Effect.succeed(requestListItem(rows[0]))
      )

    /** A request's receipt with the receipts before and after it in the project's chain. */
    const receipt = (projectId: string, requestId: string, environment: string | undefined) =>
      Effect.gen(function* () {
        const rows = yield* repo.receipt(projectId, requestId).pipe(Effect.orDie)
        const row = rows[0]
        if (row === undefined || (environment !== undefined && row.environment !== environment)) {
          return yield* new RequestNotFound({ message: `No settled request with id ${requestId} in this project${environment === undefined ? "" : " and environment"}.` })
        }
        const links = yield* repo.neighbours(projectId, row.seq).pipe(Effect.orDie)
        const link = (seq: number) => links.find((l) => l.seq === seq) ?? null
        return { object: "receipt_view" as const, receipt: JSON.parse(row.body) as Receipt, previous: link(row.seq - 1), next: link(row.seq + 1) }
      })

    /** When each of a project's keys `keyIds` (a page of them) last made a governed request (the request log's newest row per key). */
    const keysLastUsed = (projectId: string, keyIds: ReadonlyArray<string>) =>
      Effect.map(
        repo.keysLastUsed(projectId, keyIds),
        (rows) => new Map(rows.map((r) => [r.key_id, new Date(r.at).toISOString()]))
      ).pipe(Effect.orDie)

    /**
     * Credits and requests per UTC day and model for one window, summed over its receipts (all
     * environments, or one), with the window's total: with every environment it equals the
     * window's `spent`, which is posted in the same transaction as each receipt.
     */
    const dailyUsage = (projectId: string, period: string, environment: string | undefined) =>
      Effect.gen(function* () {
        const rows = yield* repo.dailyUsage(projectId, period, environment)
        const days = rows.map((r) => ({ date: r.day, model: r.model, requests: Number(r.requests), credits: Number(r.credits) }))
        return {
          days,
          receipts: days.reduce((n, d) => n + d.requests, 0),
          receipts_credits: days.reduce((n, d) => n + d.credits, 0)
        }
      }).pipe(Effect.orDie)

    return { listRequests, findRequest, receipt, keysLastUsed, dailyUsage } as const
  }),
  dependencies: [ActivityRepo.Default]
}) {}
