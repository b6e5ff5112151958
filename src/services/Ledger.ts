/**
 * The budget ledger (DESIGN.md §4): per project and settlement window (calendar month UTC),
 * two-phase holds — reserve the worst case, then settle the actual charge (≤ reserved) or void —
 * and the receipt chain written in the same transaction as the charge.
 *
 * Invariant at every instant: spent + reserved ≤ cap. It is enforced by ONE guarded UPDATE (the cap
 * is read inside the statement), so no interleaving of requests or instances can overspend.
 * A hold is resolved at most once: settle and void only move rows still in state 'held'.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect } from "effect"
import { periodOf } from "../../spec/ledger.ts"
import type { TokenCounts } from "../../spec/pricing.ts"
import { GENESIS_HASH, type Receipt, type UnsignedReceipt } from "../../spec/receipt.ts"
import { BudgetExceeded, RequestNotFound } from "../domain/errors.ts"
import type { Scope } from "./IdempotencyStore.ts"
import { ReceiptSigner } from "./ReceiptSigner.ts"
import type { Verification } from "./Requests.ts"

export { periodOf }

export interface BudgetWindow {
  readonly period: string
  readonly cap: number
  readonly spent: number
  readonly reserved: number
}

export interface Hold {
  readonly reservationId: string
  readonly requestId: string
  readonly projectId: string
  readonly period: string
  readonly amount: number
  readonly deadline: number
}

export interface Settlement {
  readonly hold: Hold
  readonly receiptId: string
  readonly organization: string
  readonly environment: string
  readonly model: string
  readonly route: string
  readonly rateCardVersion: string
  readonly tokens: TokenCounts
  readonly usageSource: "reported" | "counted"
  readonly charge: number
  readonly verification: Verification
}

export class Ledger extends Effect.Service<Ledger>()("tollgate/Ledger", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const signer = yield* ReceiptSigner

    const window = (projectId: string, period: string): Effect.Effect<BudgetWindow> =>
      Effect.map(
        sql<{ cap: number; spent: number | null; reserved: number | null }>`
          SELECT p.budget_credits AS cap, w.spent AS spent, w.reserved AS reserved
          FROM projects p LEFT JOIN budget_windows w ON w.project_id = p.id AND w.period = ${period}
          WHERE p.id = ${projectId}`,
        (rows) => ({ period, cap: rows[0]?.cap ?? 0, spent: rows[0]?.spent ?? 0, reserved: rows[0]?.reserved ?? 0 })
      ).pipe(Effect.orDie)

    /** Hold `amount` Credits, or fail with 402 when it would not fit under the cap. */
    const reserve = (hold: Hold): Effect.Effect<void, BudgetExceeded> =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const guarded = sql`UPDATE budget_windows SET reserved = reserved + ${hold.amount}
            WHERE project_id = ${hold.projectId} AND period = ${hold.period}
              AND spent + reserved + ${hold.amount} <= (SELECT budget_credits FROM projects WHERE id = ${hold.projectId})
            RETURNING reserved`
        let held = yield* guarded
        if (held.length === 0) {
          // The window may not exist yet (first hold of the month): open it and try once more. Retry even
          // when a racing hold opened it first, or that race would turn a fitting hold into a false 402.
          yield* sql`INSERT INTO budget_windows (project_id, period, spent, reserved)
                     VALUES (${hold.projectId}, ${hold.period}, 0, 0) ON CONFLICT DO NOTHING`
          held = yield* guarded
        }
        if (held.length === 0) {
          return yield* new BudgetExceeded({
            message: `This request needs up to ${hold.amount} Credits but the project's remaining budget for ${hold.period} is smaller. Raise the budget cap or wait for the next settlement window.`,
            param: null
          })
        }
        yield* sql`INSERT INTO reservations (id, request_id, project_id, period, amount, state, deadline, created_at)
                   VALUES (${hold.reservationId}, ${hold.requestId}, ${hold.projectId}, ${hold.period}, ${hold.amount}, 'held', ${hold.deadline}, ${now})`
      }).pipe(Effect.catchTag("SqlError", Effect.die))

    const resolve = (reservationId: string, state: "settled" | "voided", charge: number, now: number) =>
      sql<{ amount: number; project_id: string; period: string }>`
        UPDATE reservations SET state = ${state}, charge = ${charge}, resolved_at = ${now}
        WHERE id = ${reservationId} AND state = 'held' RETURNING amount, project_id, period`

    /**
     * Post the charge, release the rest of the hold, append the receipt to the project's chain.
     * Run inside the settlement transaction. Dies if the hold was already resolved (a bug, never a race:
     * only the request that made the hold, or the recovery sweep after its deadline, resolves it).
     */
    const settle = (s: Settlement): Effect.Effect<Receipt> =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        // One guarded UPDATE resolves the hold and clamps the charge to the amount stored with it
        // (never to what the caller says it reserved).
        const resolved = yield* sql<{ amount: number; charge: number; project_id: string; period: string }>`
          UPDATE reservations SET state = 'settled', resolved_at = ${now},
            charge = CASE WHEN ${s.charge} < amount THEN ${s.charge} ELSE amount END
          WHERE id = ${s.hold.reservationId} AND state = 'held' RETURNING amount, charge, project_id, period`
        const row = resolved[0]
        if (row === undefined) return yield* Effect.dieMessage(`reservation ${s.hold.reservationId} was already resolved`)
        const charge = row.charge
        yield* sql`UPDATE budget_windows SET spent = spent + ${charge}, reserved = reserved - ${row.amount}
                   WHERE project_id = ${row.project_id} AND period = ${row.period}`
        const head = yield* sql<{ seq: number; hash: string }>`SELECT seq, hash FROM chain_heads WHERE project_id = ${row.project_id}`
        const seq = (head[0]?.seq ?? 0) + 1
        const unsigned: UnsignedReceipt = {
          object: "receipt",
          receipt_id: s.receiptId,
          request_id: s.hold.requestId,
          organization: s.organization,
          project_id: row.project_id,
          environment: s.environment,
          status: "completed",
          verification: s.verification,
          model: s.model,
          route: s.route,
          rate_card_version: s.rateCardVersion,
          tokens: s.tokens,
          usage_source: s.usageSource,
          credits_reserved: row.amount,
          credits_charged: charge,
          period: row.period,
          seq,
          created_at: new Date(now).toISOString(),
          prev_hash: head[0]?.hash ?? GENESIS_HASH,
          signing_key_id: signer.keyId
        }
        const receipt = signer.seal(unsigned)
        yield* sql`INSERT INTO receipts (id, request_id, project_id, environment, period, seq, credits_charged, rate_card_version,
                     body, prev_hash, hash, signature, signing_key_id, created_at,
                     route, input_tokens, cached_input_tokens, output_tokens, reasoning_tokens)
                   VALUES (${receipt.receipt_id}, ${receipt.request_id}, ${receipt.project_id}, ${receipt.environment}, ${receipt.period},
                     ${seq}, ${charge}, ${receipt.rate_card_version}, ${JSON.stringify(receipt)}, ${receipt.prev_hash}, ${receipt.hash},
                     ${receipt.signature}, ${receipt.signing_key_id}, ${now},
                     ${s.route}, ${s.tokens.input}, ${s.tokens.cached_input}, ${s.tokens.output}, ${s.tokens.reasoning})`
        yield* sql`INSERT INTO chain_heads (project_id, seq, hash) VALUES (${row.project_id}, ${seq}, ${receipt.hash})
                   ON CONFLICT (project_id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash`
        return receipt
      }).pipe(Effect.orDie)

    /** Release a hold with no charge. Returns false if it was already resolved. */
    const release = (reservationId: string): Effect.Effect<boolean> =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const resolved = yield* resolve(reservationId, "voided", 0, now)
        const row = resolved[0]
        if (row === undefined) return false
        yield* sql`UPDATE budget_windows SET reserved = reserved - ${row.amount}
                   WHERE project_id = ${row.project_id} AND period = ${row.period}`
        return true
      }).pipe(Effect.orDie)

    /** Push a live hold's deadline (and its idempotency claim's) out, so a long stream is not swept. */
    const extendHold = (reservationId: string, deadline: number) =>
      sql`UPDATE reservations SET deadline = ${deadline} WHERE id = ${reservationId} AND state = 'held'`.pipe(Effect.orDie, Effect.asVoid)

    /** Holds whose deadline passed: their process died or hung. */
    const expiredHolds = (now: number) =>
      sql<{ id: string; request_id: string }>`SELECT id, request_id FROM reservations WHERE state = 'held' AND deadline <= ${now}`.pipe(Effect.orDie)

    const receipt = (requestId: string, scope: Scope): Effect.Effect<Receipt, RequestNotFound> =>
      Effect.flatMap(
        sql<{ body: string }>`SELECT body FROM receipts WHERE request_id = ${requestId}
                              AND project_id = ${scope.projectId} AND environment = ${scope.environment}`.pipe(Effect.orDie),
        (rows) =>
          rows[0] === undefined
            ? Effect.fail(new RequestNotFound({ message: `No settled request with id ${requestId} in this project and environment.` }))
            : Effect.succeed(JSON.parse(rows[0].body) as Receipt)
      )

    /** Usage of one tenant scope in one window: every figure is a sum over that window's receipts. */
    const usage = (scope: Scope, period: string) =>
      Effect.gen(function* () {
        const rows = yield* sql<{
          route: string
          requests: number
          credits: number
          input_tokens: number
          cached_input_tokens: number
          output_tokens: number
          reasoning_tokens: number
        }>`SELECT route, COUNT(*) AS requests, SUM(credits_charged) AS credits,
             SUM(input_tokens) AS input_tokens, SUM(cached_input_tokens) AS cached_input_tokens,
             SUM(output_tokens) AS output_tokens, SUM(reasoning_tokens) AS reasoning_tokens
           FROM receipts WHERE project_id = ${scope.projectId} AND environment = ${scope.environment} AND period = ${period}
           GROUP BY route ORDER BY route`
        return rows.map((r) => ({
          model: r.route,
          requests: Number(r.requests),
          credits: Number(r.credits),
          tokens: {
            input: Number(r.input_tokens),
            cached_input: Number(r.cached_input_tokens),
            output: Number(r.output_tokens),
            reasoning: Number(r.reasoning_tokens)
          }
        }))
      }).pipe(Effect.orDie)

    return { window, reserve, settle, release, extendHold, expiredHolds, receipt, usage, periodOf } as const
  })
}) {}
