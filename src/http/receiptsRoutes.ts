/**
 * The verification endpoints' handlers (src/http/receiptsApi.ts), over src/services/ReceiptLog.ts.
 * The governed group's (project key: the caller's own project) are wired in ./apiRoutes.ts, the
 * operator's export and statement in ./adminRoutes.ts. Errors answer in the OpenAI shape through `respondErrors`.
 */
import { HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { EXPORT_CONTENT_TYPE } from "../../spec/export.ts"
import { ReceiptLog } from "../services/ReceiptLog.ts"
import { CurrentPrincipal } from "./api.ts"
import { respondErrors } from "./caller.ts"

type ExportQuery = { readonly period?: string | undefined; readonly cursor?: string | undefined; readonly limit?: string | undefined }

/** A project's export page as a streamed JSON Lines response, with its x-next-cursor. */
export const exportResponse = (projectId: string, query: ExportQuery) =>
  respondErrors(
    Effect.gen(function* () {
      const page = yield* (yield* ReceiptLog).exportPage(projectId, query)
      return HttpServerResponse.stream(page.body, {
        contentType: EXPORT_CONTENT_TYPE,
        headers: { "cache-control": "no-store", ...(page.nextCursor === null ? {} : { "x-next-cursor": page.nextCursor }) }
      })
    })
  )

const project = Effect.map(CurrentPrincipal, (p) => p.projectId)

export const receiptHandlers = {
  exportReceipts: ({ urlParams }: { readonly urlParams: ExportQuery }) => Effect.flatMap(project, (id) => exportResponse(id, urlParams)),

  getCheckpoint: ({ urlParams }: { readonly urlParams: { readonly tree_size?: string | undefined } }) =>
    respondErrors(
      Effect.gen(function* () {
        const cp = yield* (yield* ReceiptLog).checkpoint(yield* project, urlParams.tree_size)
        return HttpServerResponse.text(cp.note, { contentType: "text/plain; charset=utf-8" })
      })
    ),

  getInclusionProof: ({ path, urlParams }: { readonly path: { readonly id: string }; readonly urlParams: { readonly tree_size?: string | undefined } }) =>
    respondErrors(
      Effect.gen(function* () {
        const p = yield* CurrentPrincipal
        return yield* (yield* ReceiptLog).inclusion({ projectId: p.projectId, environment: p.environment }, path.id, urlParams.tree_size)
      })
    ),

  getConsistencyProof: ({ urlParams }: { readonly urlParams: { readonly from?: string | undefined; readonly to?: string | undefined } }) =>
    respondErrors(Effect.gen(function* () {
      return yield* (yield* ReceiptLog).consistency(yield* project, urlParams.from, urlParams.to)
    })),

  getStatement: ({ path }: { readonly path: { readonly period: string } }) => Effect.flatMap(project, (id) => statementOf(id, path.period))
}

/** A project's statement of a closed period (the governed group's for the caller's project, the admin group's for any). */
export const statementOf = (projectId: string, period: string) => respondErrors(Effect.flatMap(ReceiptLog, (log) => log.statement(projectId, period)))
