/** Arbitrary unsigned receipts for properties over the receipt's stored and signed forms. */
import fc from "fast-check"
import type { UnsignedReceipt } from "../../spec/receipt.ts"

/** Any text, quotes, backslashes, the members' own names, lone surrogates and non-BMP characters included. */
const text = fc.oneof(
  fc.string({ unit: "binary", maxLength: 12 }),
  fc.constantFrom(',"model":"x"', ',"key_id":"k"', ',"signing_key_id":', '"hash"', "\\", "\u2028", "😀", "\ud800", "x\udc00")
)

export const unsignedReceipt: fc.Arbitrary<UnsignedReceipt> = fc.record({
  object: fc.constant("receipt" as const),
  receipt_id: text,
  request_id: text,
  organization: text,
  project_id: text,
  environment: text,
  status: fc.constant("completed" as const),
  verification: fc.record({
    state: fc.constantFrom("verified" as const, "unverified" as const),
    checks: fc.array(text, { maxLength: 3 }),
    failed_checks: fc.array(text, { maxLength: 2 })
  }),
  model: text,
  route: text,
  rate_card_version: text,
  tokens: fc.record({ input: fc.nat(), cached_input: fc.nat(), output: fc.nat(), reasoning: fc.nat() }),
  usage_source: fc.constantFrom("reported" as const, "counted" as const),
  credits_reserved: fc.maxSafeNat(),
  credits_charged: fc.maxSafeNat(),
  period: text,
  seq: fc.integer({ min: 1, max: 1e9 }),
  created_at: fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
  prev_hash: text,
  signing_key_id: text,
  // Issue 41: the key and end user charged, absent from older receipts.
  key_id: text,
  end_user: text
}, { requiredKeys: ["object", "receipt_id", "request_id", "organization", "project_id", "environment", "status", "verification", "model", "route",
  "rate_card_version", "tokens", "usage_source", "credits_reserved", "credits_charged", "period", "seq", "created_at", "prev_hash", "signing_key_id"] })
