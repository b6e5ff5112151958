/**
 * The store's statements (src/store/*Statements.ts) run one at a time in a transaction of the main
 * connection, for unit tests of the statements themselves: the same prepared statements the store
 * port's transactions compose (src/store/chatTransactions.ts), without the composition. The governed
 * transactions as production runs them are tested through the port (test/store/ChatStore.test.ts,
 * test/model/).
 */
import { Clock, Effect } from "effect"
import type { Receipt } from "../../spec/receipt.ts"
import { IdempotencyStore } from "../../src/services/IdempotencyStore.ts"
import { Ledger } from "../../src/services/Ledger.ts"
import { ReceiptSigner } from "../../src/services/ReceiptSigner.ts"
import { Sqlite } from "../../src/store/Database.ts"
import { type ClaimOutcome, makeIdempotencyStatements, type Scope, type StoredResult } from "../../src/store/idempotencyStatements.ts"
import { type Hold, makeLedgerStatements, type Settlement } from "../../src/store/ledgerStatements.ts"

export const ledgerStatements = Effect.gen(function* () {
  const { db, transact } = yield* Sqlite
  const signer = yield* ReceiptSigner
  const ledger = yield* Ledger
  const st = makeLedgerStatements(db, signer)
  const at = <A, E>(f: (now: number) => Effect.Effect<A, E>) => Effect.flatMap(Clock.currentTimeMillis, f)
  return {
    window: ledger.window,
    receipt: ledger.receipt,
    usage: ledger.usage,
    reserve: (h: Hold) =>
      at((now) =>
        transact<void, { readonly _tag: "BudgetExceeded" }>((abort) => {
          if (st.reserveSync(h, now, null) !== "held") abort({ _tag: "BudgetExceeded" })
        })
      ),
    settle: (s: Settlement): Effect.Effect<Receipt> => at((now) => transact(() => st.settleSync(s, now))),
    release: (id: string): Effect.Effect<boolean> => at((now) => transact(() => st.releaseSync(id, now))),
    extendHold: (id: string, deadline: number) => transact(() => st.extendHoldSync(id, deadline)),
    expiredHolds: (now: number) => Effect.sync(() => st.expiredSync(now))
  }
})

export const idempotencyStatements = Effect.gen(function* () {
  const { db, transact } = yield* Sqlite
  const service = yield* IdempotencyStore
  const st = makeIdempotencyStatements(db)
  const at = <A, E>(f: (now: number) => Effect.Effect<A, E>) => Effect.flatMap(Clock.currentTimeMillis, f)
  return {
    peek: service.peek,
    awaitSettled: service.awaitSettled,
    claim: (scope: Scope, key: string, fingerprint: string, requestId: string, claimExpiresAt: number): Effect.Effect<ClaimOutcome> =>
      at((now) => transact(() => st.claimSync(scope, key, fingerprint, requestId, claimExpiresAt, now, null))),
    finish: (scope: Scope, key: string, requestId: string, result: Omit<StoredResult, "requestId">, ttlMs: number) =>
      at((now) => transact(() => st.finishSync(scope, key, requestId, result, ttlMs, now))),
    release: (scope: Scope, key: string, requestId: string) => transact(() => st.releaseSync(scope, key, requestId)),
    releaseRequests: (ids: ReadonlyArray<string>) => transact(() => ids.forEach((id) => st.releaseRequestSync(id)))
  }
})
