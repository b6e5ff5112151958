/**
 * Wire shapes of a governed request's records, read by project keys (src/http/schemas.ts re-exports
 * them for `/openapi.json`) and by the dashboard through the admin API (./admin.ts). Schemas only:
 * no service, no node module, so the dashboard's types import them too (dashboard/src/api.ts).
 */
import { Schema } from "effect"

export const Verification = Schema.Struct({
  state: Schema.Literal("verified", "unverified"),
  checks: Schema.Array(Schema.String),
  failed_checks: Schema.Array(Schema.String)
}).annotations({ identifier: "Verification" })

export const TokenCounts = Schema.Struct({
  input: Schema.Int,
  cached_input: Schema.Int,
  output: Schema.Int,
  reasoning: Schema.Int
}).annotations({ identifier: "TokenCounts", description: "Disjoint token classes: input excludes cached input, output excludes reasoning." })

export const Attempt = Schema.Struct({
  route: Schema.String,
  provider: Schema.String,
  outcome: Schema.Literal("ok", "error", "skipped"),
  status: Schema.optional(Schema.Number),
  error: Schema.optional(Schema.String),
  duration_ms: Schema.Number
}).annotations({ identifier: "Attempt" })

export const RequestStatus = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("governed_request"),
  status: Schema.Literal("pending", "completed", "failed"),
  endpoint: Schema.String,
  model: Schema.String,
  route: Schema.NullOr(Schema.String),
  stream: Schema.Boolean,
  verification: Schema.NullOr(Verification),
  credits_reserved: Schema.Int,
  credits_charged: Schema.NullOr(Schema.Int),
  rate_card_version: Schema.NullOr(Schema.String),
  receipt_id: Schema.NullOr(Schema.String),
  attempts: Schema.Array(Attempt),
  error: Schema.NullOr(Schema.Struct({ code: Schema.String, message: Schema.NullOr(Schema.String) })),
  created_at: Schema.String,
  completed_at: Schema.NullOr(Schema.String)
}).annotations({ identifier: "RequestStatus" })

export const Receipt = Schema.Struct({
  object: Schema.Literal("receipt"),
  receipt_id: Schema.String,
  request_id: Schema.String,
  organization: Schema.String,
  project_id: Schema.String,
  environment: Schema.String,
  status: Schema.Literal("completed"),
  verification: Verification,
  model: Schema.String,
  route: Schema.String,
  rate_card_version: Schema.String,
  tokens: TokenCounts,
  usage_source: Schema.Literal("reported", "counted"),
  credits_reserved: Schema.Int,
  credits_charged: Schema.Int,
  period: Schema.String,
  seq: Schema.Int,
  created_at: Schema.String,
  prev_hash: Schema.String,
  signing_key_id: Schema.String,
  /** The key and the end user the call was charged to (issue 41); absent from older receipts. */
  key_id: Schema.optionalWith(Schema.String, { exact: true }),
  end_user: Schema.optionalWith(Schema.String, { exact: true }),
  hash: Schema.String,
  signature: Schema.String
}).annotations({ identifier: "Receipt", description: "Signed (Ed25519) and hash-chained per project; see docs/receipts.md." })

export const ReceiptKeys = Schema.Struct({
  object: Schema.Literal("list"),
  data: Schema.Array(
    Schema.Struct({
      id: Schema.String,
      algorithm: Schema.Literal("Ed25519"),
      public_key: Schema.String,
      created_at: Schema.String,
      retired_at: Schema.NullOr(Schema.String)
    })
  )
}).annotations({ identifier: "ReceiptKeys" })
