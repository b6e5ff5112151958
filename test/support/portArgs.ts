/**
 * Arguments for the store port's transactions (src/store/ChatStore.ts) as the Gateway builds them,
 * for tests that drive the port directly (test/store, test/services, test/model).
 *
 * A reservation sized to exactly `amount` Credits: `amount` input tokens at 1 Credit each
 * (1,000,000 per million), free output, one output token — so a test names the hold it wants and the
 * production body still sizes it on the window it reads in its transaction.
 */
import type { Scope } from "../../src/store/idempotencyStatements.ts"
import type { AbandonArgs, ReserveArgs, SettleArgs } from "../../src/store/chatTransactions.ts"
import type { Hold } from "../../src/store/ledgerStatements.ts"
import { newReceiptId, newRequestId, newReservationId } from "../../src/domain/ids.ts"

export interface ReserveOptions {
  readonly now?: number
  readonly period?: string
  readonly deadline?: number
  readonly claim?: { readonly key: string; readonly fingerprint: string; readonly environment?: string }
  readonly stream?: boolean
  /** Ids to use instead of fresh ones (models name their holds). */
  readonly ids?: { readonly reservationId: string; readonly requestId: string }
  readonly maxCredits?: number
  /** The key and end user the hold is in besides the project (issue 41, spec/scopes.ts); none when absent. */
  readonly keyId?: string
  readonly endUser?: string
}

export const DEFAULT_NOW = Date.UTC(2026, 0, 15)

export const reserveArgs = (projectId: string, amount: number, o: ReserveOptions = {}): ReserveArgs => {
  const now = o.now ?? DEFAULT_NOW
  const period = o.period ?? "2026-01"
  const requestId = o.ids?.requestId ?? newRequestId(now)
  const environment = o.claim?.environment ?? "development"
  return {
    now,
    epoch: 1,
    claim: o.claim === undefined ? undefined : { scope: { projectId, environment }, key: o.claim.key, fingerprint: o.claim.fingerprint },
    request: {
      id: requestId,
      projectId,
      environment,
      keyId: "key_test",
      endpoint: "/v1/chat/completions",
      model: "auto",
      route: "demo",
      stream: o.stream ?? false,
      idempotencyKey: o.claim?.key ?? null,
      rateCardVersion: "rc_2026-01",
      createdAt: now
    },
    hold: {
      reservationId: o.ids?.reservationId ?? newReservationId(now),
      requestId,
      projectId,
      period,
      deadline: o.deadline ?? now + 60_000,
      ...(o.keyId === undefined ? {} : { keyId: o.keyId }),
      ...(o.endUser === undefined ? {} : { endUser: o.endUser })
    },
    sizing: {
      chain: [{ name: "demo", prices: { input: 1_000_000, output: 0 }, routeLimit: 16 }],
      inputTokens: amount,
      requested: 1,
      maxCredits: o.maxCredits,
      maxCreditsParam: "X-Max-Credits",
      period
    }
  }
}

/** The hold a reservation of `amount` made. */
export const holdOf = (r: ReserveArgs, amount: number): Hold => ({ ...r.hold, amount })

export const settleArgs = (
  r: ReserveArgs,
  amount: number,
  charge: number,
  o: { readonly now?: number; readonly result?: { readonly status: number; readonly body: string }; readonly ttlMs?: number } = {}
): SettleArgs => ({
  now: o.now ?? r.now + 1,
  hold: holdOf(r, amount),
  receiptId: newReceiptId(r.now),
  organization: "org_test",
  environment: r.request.environment,
  model: "auto",
  route: "demo",
  rateCardVersion: "rc_2026-01",
  tokens: { input: charge, cached_input: 0, output: 0, reasoning: 0 },
  usageSource: "reported",
  charge,
  verification: { state: "verified", checks: ["route", "schema", "budget"], failed_checks: [] },
  attempts: [{ route: "demo", provider: "demo", outcome: "ok", duration_ms: 1 }],
  idempotent:
    r.claim === undefined
      ? undefined
      : {
          scope: r.claim.scope,
          key: r.claim.key,
          ttlMs: o.ttlMs ?? 86_400_000,
          result: { status: o.result?.status ?? 200, contentType: "application/json", body: new TextEncoder().encode(o.result?.body ?? '{"ok":true}') }
        }
})

export const abandonArgs = (r: ReserveArgs, o: { readonly now?: number; readonly code?: string } = {}): AbandonArgs => ({
  now: o.now ?? r.now + 1,
  reservationId: r.hold.reservationId,
  requestId: r.request.id,
  code: o.code ?? "route_unavailable",
  message: "no route",
  attempts: [],
  idempotent: r.claim === undefined ? undefined : { scope: r.claim.scope as Scope, key: r.claim.key }
})
