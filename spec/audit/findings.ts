/** The audit's findings: every kind, with what it means, and the shape of one (spec/audit.ts). */

/** Every kind of finding, with what it means. The audit names the subject of each (see `Finding`). */
export const findingKinds = {
  // A receipt on its own
  receipt_malformed: "the stored receipt body is not a well-formed receipt (subject: receipt id)",
  receipt_column_mismatch: "an indexed column of the receipts row disagrees with the signed body (subject: receipt id)",
  receipt_hash_mismatch: "the receipt body does not hash to its recorded hash: it was edited after sealing (subject: receipt id)",
  signature_invalid: "the Ed25519 signature does not verify with the named public key (subject: receipt id)",
  signing_key_unknown: "the receipt names a signing key that is not among the trusted public keys (subject: receipt id)",
  signing_key_retired: "the receipt was created after its signing key was retired (subject: receipt id)",
  signing_key_invalid: "a stored public key is unreadable or its id is not derived from it (subject: key id)",
  // The chain of a project
  chain_order: "the receipt's signed seq is not its place in the project's chain: receipts were reordered (subject: receipt id)",
  chain_gap: "seq numbers are missing before this receipt: receipts were deleted (subject: the receipt after the gap)",
  chain_broken: "prev_hash is not the hash of the receipt before it (subject: receipt id)",
  chain_head_mismatch: "the recorded chain head is not the last receipt of the chain (subject: project id)",
  // Charges
  charge_mismatch: "credits_charged is not the charge recomputed from the token counts and the rate card (subject: receipt id)",
  charge_exceeds_reservation: "credits_charged is larger than credits_reserved (subject: receipt id)",
  rate_card_mismatch:
    "intact, signed receipts do not recompute under the stored rate card: the card was edited after use, or the gateway mischarged (subject: rate card version)",
  rate_card_missing: "a receipt names a rate card, or a route of a card, that the store does not hold (subject: rate card version)",
  rate_card_not_in_force: "the receipt's rate card was not yet effective when its request started (subject: receipt id)",
  // Ledger
  window_spent_mismatch: "the window's spent is not the sum of its receipts' charges (subject: project/period)",
  window_reserved_mismatch: "the window's reserved is not the sum of its held reservations (subject: project/period)",
  window_over_cap: "spent + reserved exceeds the project's budget cap (subject: project/period)",
  reservation_resolved_twice: "a reservation was settled (it has a receipt) and also voided (subject: reservation id)",
  reservation_mismatch: "a receipt and its reservation disagree: state, amount, charge, project or period (subject: receipt id)",
  receipt_without_reservation: "a receipt whose request holds no reservation (subject: receipt id)",
  // Requests
  receipt_without_request: "a receipt whose request does not exist (subject: receipt id)",
  request_mismatch: "a receipt and its request row disagree: status, receipt id, charge, scope or rate card (subject: receipt id)",
  settled_request_without_receipt: "a completed request, or a settled reservation, with no receipt (subject: request id)",
  // Idempotency
  idempotency_without_receipt: "a finished idempotency record whose request has no receipt (subject: request id)",
  idempotency_mismatch: "an idempotency record disagrees with its request's receipt or state (subject: request id)",
  // Monthly statements (issue 43; spec/audit/statements.ts)
  statement_malformed: "a stored statement is not a well-formed statement of its project and period (subject: project/period)",
  statement_signature_invalid: "a stored statement's signature does not verify with a trusted receipt key (subject: project/period)",
  statement_totals_mismatch: "a stored statement's figure differs from the sum of its period's receipts (subject: project/period)"
} as const

export type FindingKind = keyof typeof findingKinds

export interface Finding {
  readonly kind: FindingKind
  /** The one id the finding names: a receipt, request, reservation or key id, a rate card version, a project id, or "project/period". */
  readonly subject: string
  readonly project?: string | undefined
  readonly message: string
  readonly detail?: Readonly<Record<string, unknown>> | undefined
}


/** How a check reports a finding: its kind, subject, project, message and detail. */
export type Report = (kind: FindingKind, subject: string, project: string | undefined, message: string, detail?: Record<string, unknown>) => void
