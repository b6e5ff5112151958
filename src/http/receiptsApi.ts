/**
 * The verification endpoints (issue 43, DESIGN §11; formats in docs/contract.md "Verification
 * formats"): the receipt export, the Merkle log's checkpoints and proofs, the monthly statements.
 * Defined here, added to the governed group (project key) and the admin group by src/http/api.ts and
 * src/http/adminApi.ts, served by src/http/receiptsRoutes.ts over src/services/ReceiptLog.ts.
 */
import { HttpApiEndpoint, HttpApiSchema } from "@effect/platform"
import { Schema } from "effect"
import { AdminNotFound } from "../domain/errors.ts"
import * as S from "./schemas.ts"

const notFound = S.errorBodyOf(AdminNotFound, "no checkpoint of that size (or none yet), or the period has not closed yet (its statement does not exist until it has)")

const Hashes = Schema.Array(Schema.String.annotations({ description: "A 32-byte hash, standard padded base64" }))

export const InclusionProof = Schema.Struct({
  object: Schema.Literal("inclusion_proof"),
  leaf_index: Schema.Int.annotations({ description: "The receipt's leaf: seq − 1" }),
  tree_size: Schema.Int,
  hashes: Hashes
}).annotations({ identifier: "InclusionProof", description: "RFC 9162 §2.1.3 inclusion proof of a receipt in the project's Merkle log of `tree_size` leaves." })

export const ConsistencyProof = Schema.Struct({
  object: Schema.Literal("consistency_proof"),
  from: Schema.Int,
  to: Schema.Int,
  hashes: Hashes
}).annotations({ identifier: "ConsistencyProof", description: "RFC 9162 §2.1.4 consistency proof: the tree of size `from` is a prefix of the tree of size `to`." })

const Tokens = Schema.Struct({ input: Schema.Int, cached_input: Schema.Int, output: Schema.Int, reasoning: Schema.Int })

export const StatementSchema = Schema.Struct({
  object: Schema.Literal("statement"),
  version: Schema.Literal(1),
  project_id: Schema.String,
  period: Schema.String,
  cap: Schema.Int,
  spent: Schema.Int,
  receipt_count: Schema.Int,
  by_model: Schema.Record({ key: Schema.String, value: Schema.Struct({ requests: Schema.Int, tokens: Tokens, credits: Schema.Int }) }),
  rate_card_versions: Schema.Array(Schema.String),
  checkpoint: Schema.String.annotations({ description: "The signed checkpoint (C2SP signed note) of the log at the close" }),
  closed_at: Schema.String,
  signing_key_id: Schema.String,
  signature: Schema.String.annotations({ description: "base64url Ed25519 over 'tollgate statement v1\\n' + canonical JSON of the statement without signature" })
}).annotations({ identifier: "Statement", description: "A closed period's signed statement (spec/statement.ts)." })

const ExportParams = Schema.Struct({
  period: Schema.optional(Schema.String.annotations({ description: "YYYY-MM: only the receipts of this budget window (default: the whole chain)" })),
  cursor: Schema.optional(Schema.String.annotations({ description: "The x-next-cursor of the previous page" })),
  limit: Schema.optional(Schema.String.annotations({ description: "At most this many chain positions a page, 1 to 100000 (default 1000)" }))
})

const ExportBody = HttpApiSchema.Text({ contentType: "application/jsonl" }).annotations({
  description:
    "JSON Lines: a header line {object: receipt_export, version, project_id, period, cursor, next_cursor, keys}, then the receipts as GET /v1/requests/{id}/receipt serves them, in chain order. Header x-next-cursor: the next page's cursor (absent on the last)."
})

const Checkpoint = HttpApiSchema.Text({ contentType: "text/plain" }).annotations({
  description: "A C2SP signed note of a C2SP tlog-checkpoint: tollgate/<project id>, tree size, base64 root, `time <ISO-8601>`, then the receipt key's signature line."
})

const SizeParam = (description: string) => Schema.String.annotations({ description })

/** The project-key endpoints (added to the governed group). */
export const receiptEndpoints = {
  exportReceipts: HttpApiEndpoint.get("exportReceipts", "/v1/receipts").setUrlParams(ExportParams).addSuccess(ExportBody).addError(S.Errors.invalidRequest),
  getCheckpoint: HttpApiEndpoint.get("getCheckpoint", "/v1/receipts/checkpoint")
    .setUrlParams(Schema.Struct({ tree_size: Schema.optional(SizeParam("The checkpoint of exactly this size (default: the latest)")) }))
    .addSuccess(Checkpoint)
    .addError(S.Errors.invalidRequest)
    .addError(notFound),
  getConsistencyProof: HttpApiEndpoint.get("getConsistencyProof", "/v1/receipts/consistency")
    .setUrlParams(Schema.Struct({ from: Schema.optional(SizeParam("The older tree size")), to: Schema.optional(SizeParam("The newer tree size, at most the log's size")) }))
    .addSuccess(ConsistencyProof)
    .addError(S.Errors.invalidRequest),
  getInclusionProof: HttpApiEndpoint.get("getInclusionProof", "/v1/requests/:id/receipt/proof")
    .setPath(Schema.Struct({ id: Schema.String.annotations({ description: "A request id, req_…" }) }))
    .setUrlParams(Schema.Struct({ tree_size: Schema.optional(SizeParam("The tree size of a checkpoint you hold, at most the log's size")) }))
    .addSuccess(InclusionProof)
    .addError(S.Errors.invalidRequest)
    .addError(S.Errors.requestNotFound),
  getStatement: HttpApiEndpoint.get("getStatement", "/v1/statements/:period")
    .setPath(Schema.Struct({ period: Schema.String.annotations({ description: "YYYY-MM" }) }))
    .addSuccess(StatementSchema)
    .addError(S.Errors.invalidRequest)
    .addError(notFound)
}

const ProjectId = Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9_-]{1,64}$/)).annotations({ description: "A project id, prj_…" })

/** The operator's export of a project (added to the admin group). */
export const adminExportReceipts = HttpApiEndpoint.get("exportProjectReceipts", "/admin/v1/projects/:id/receipts")
  .setPath(Schema.Struct({ id: ProjectId }))
  .setUrlParams(ExportParams)
  .addSuccess(ExportBody)
  .addError(S.Errors.invalidRequest)

/** The operator's copy of a project's statement, the body `GET /v1/statements/{period}` serves (added to the admin group). */
export const adminStatement = HttpApiEndpoint.get("getProjectStatement", "/admin/v1/projects/:id/statements/:period")
  .setPath(Schema.Struct({ id: ProjectId, period: Schema.String.annotations({ description: "YYYY-MM" }) }))
  .addSuccess(StatementSchema)
  .addError(S.Errors.invalidRequest)
  .addError(notFound)
