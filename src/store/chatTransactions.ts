/**
 * The governed call's four write transactions (docs/contract.md §3), as synchronous bodies over one
 * better-sqlite3 connection. Their arguments and results are plain data, so the same bodies run on
 * the main thread (`Sqlite.transact`, an in-memory store) or in the store worker that owns the write
 * connection of a file store (src/store/storeWorker.ts), batched and group-committed either way:
 *
 * - reserve: the idempotency claim, the output cap and hold sized on the window read in the same
 *   transaction, the pending request row and the budget hold;
 * - settle: the charge, the signed receipt, the request's completion and the stored idempotent result;
 * - abandon: void the hold, fail the request, free the idempotency key (nothing was charged);
 * - extend: push the holds and claims of calls in flight a TTL ahead;
 * - heartbeat: this process's epoch is alive, and its open streams' progress marks (src/store/epochs.ts);
 * - expire: the recovery sweep — void every hold past its deadline, fail its request, free its claim.
 *
 * A refused reservation rolls back and aborts with `ReserveRefused`, data the caller turns into its reply.
 *
 * This is the store port's core: what a second engine (PostgreSQL) implements is `ChatStoreApi`
 * (src/store/ChatStore.ts) over these arguments and results, which carry no SQLite types. The
 * statements are src/store's own (ledgerStatements, idempotencyStatements, requestStatements); the
 * rules they need come from spec/ and domain/ (the sizing, the receipt seal), never from a service.
 */
import type BetterSqlite3 from "better-sqlite3"
import { checkWindow } from "../../spec/ledger.ts"
import { holdRefusedMessage, sizeInScopes, type SizingRequest } from "../domain/budgetSizing.ts"
import { type ClaimOutcome, makeIdempotencyStatements, type Scope, type StoredResult } from "./idempotencyStatements.ts"
import { type Hold, makeLedgerStatements, type Sealer, type Settlement } from "./ledgerStatements.ts"
import { type Attempt, makeRequestStatements, type NewRequest } from "./requestStatements.ts"
import { crashPoint } from "../domain/crashPoint.ts"
import { makeEpochWrites, type ProgressMark } from "./epochs.ts"
import type { Abort } from "./syncTransactions.ts"
import type { ServerOverloaded } from "../domain/errors.ts"

export interface ReserveArgs {
  readonly now: number
  /** The idempotency claim to take first, when the call carries a key. */
  readonly claim: { readonly scope: Scope; readonly key: string; readonly fingerprint: string } | undefined
  /** The pending request row and the hold, but for the amount: sized here, on the window read here. */
  readonly request: Omit<NewRequest, "creditsReserved">
  readonly hold: Omit<Hold, "amount">
  readonly sizing: SizingRequest
  /** The epoch of the process making the hold and the claim (migration 0004): recovered by it if the process dies. */
  readonly epoch: number
}

/** What was reserved: the output cap the upstream call gets and the Credits held for it. */
export interface Reserved {
  readonly outputCap: number
  readonly reservation: number
}

/** Why a reservation was refused (and rolled back). */
export type ReserveRefused =
  | { readonly _tag: "ClaimLost"; readonly outcome: ClaimOutcome }
  | { readonly _tag: "OverBudget"; readonly message: string; readonly param: string | null }
  /** Shed by the store's bounds (a lane, a wait, a hot row) before anything was held: 503 with Retry-After (docs/decisions/0046). */
  | { readonly _tag: "Shed"; readonly error: ServerOverloaded }

/** The ledger's settlement (charge and receipt), plus what the request row and the replay record need. */
export interface SettleArgs extends Settlement {
  readonly now: number
  readonly attempts: ReadonlyArray<Attempt>
  /** The response to store for replay, when the call carries an idempotency key. */
  readonly idempotent:
    | { readonly scope: Scope; readonly key: string; readonly ttlMs: number; readonly result: Omit<StoredResult, "requestId"> }
    | undefined
}

export interface AbandonArgs {
  readonly now: number
  readonly reservationId: string
  readonly requestId: string
  readonly code: string
  readonly message: string
  readonly attempts: ReadonlyArray<Attempt>
  readonly idempotent: { readonly scope: Scope; readonly key: string } | undefined
}

export interface ExtendArgs {
  readonly deadline: number
  readonly streams: ReadonlyArray<{
    readonly reservationId: string
    readonly requestId: string
    readonly idempotent: { readonly scope: Scope; readonly key: string } | undefined
  }>
}

export interface ExpireArgs {
  readonly now: number
  /** What the failed request rows say. */
  readonly failure: { readonly code: string; readonly message: string }
}

export interface HeartbeatArgs {
  readonly epoch: number
  readonly now: number
  /** Progress marks of open streams that delivered more since the last beat. */
  readonly marks: ReadonlyArray<{ readonly reservationId: string; readonly mark: ProgressMark }>
}

/** The transactions by name: what a message to the store worker names. */
export interface ChatTransactions {
  readonly reserve: (args: ReserveArgs, abort: Abort<ReserveRefused>) => Reserved
  readonly settle: (args: SettleArgs) => void
  readonly abandon: (args: AbandonArgs) => void
  readonly extend: (args: ExtendArgs) => void
  readonly heartbeat: (args: HeartbeatArgs) => void
  /** How many holds it voided. */
  readonly expire: (args: ExpireArgs) => number
}

export type ChatOp = keyof ChatTransactions

/**
 * Whether a transaction's COMMIT must reach the disk before its caller goes on (synchronous=FULL), or
 * may ride on the next COMMIT that does (src/store/syncTransactions.ts). The rule: a commit is synced
 * before the gateway tells the caller anything that rests on it. A settlement is followed by its
 * response, an abandonment by an error reply, and a stream's reservation by the stream's headers with
 * its request id: synced. A non-streamed call's reservation is followed by nothing the caller sees
 * until its settlement or abandonment, whose fsync puts it on disk too (the WAL is appended in order,
 * and a power loss leaves a prefix of it). So it skips its own fsync: after a crash of the process it
 * is there, and the recovery sweep voids it as before; after a power loss it is there, or gone
 * together with its call, which never answered — the ledger the sweep would have left (nothing
 * charged, the key free), without the failed request row. What other readers saw of it meanwhile
 * (the hold in GET /v1/usage's `reserved`, the pending request) was in-flight state either way.
 * The store worker commits a stream's reservation unsynced too and puts it on disk with `sync`, which
 * the Gateway runs while the upstream opens and waits for before the headers (docs/decisions/0013).
 */
export const mustSync = (op: ChatOp, args: unknown): boolean => op !== "reserve" || (args as ReserveArgs).request.stream

export interface ChatTransactionOptions {
  /** Assertion mode (TOLLGATE_ASSERT=1): check the window after each settlement and abandonment. */
  readonly assertInvariants?: boolean
}

/** A window broke the rulebook inside a transaction (assertion mode): the transaction dies and rolls back. */
export class InvariantViolated extends Error {
  override readonly name = "InvariantViolated"
}

export const makeChatTransactions = (db: BetterSqlite3.Database, sealer: Sealer, options: ChatTransactionOptions = {}): ChatTransactions => {
  const ledger = makeLedgerStatements(db, sealer)
  const requests = makeRequestStatements(db)
  const idempotency = makeIdempotencyStatements(db)
  const epochs = makeEpochWrites(db)

  /** Assertion mode: the window's rules (spec/ledger.ts `checkWindow`) on the rows this transaction wrote. */
  const assertWindow = (projectId: string, period: string, after: string): void => {
    if (options.assertInvariants !== true) return
    const findings = checkWindow(ledger.windowFactsSync(projectId, period))
    if (findings.length > 0) {
      throw new InvariantViolated(`TOLLGATE_ASSERT: window ${projectId}/${period} after ${after}: ${findings.map((f) => `${f.invariant} (${f.detail})`).join("; ")}`)
    }
  }

  const reserve = (a: ReserveArgs, abort: Abort<ReserveRefused>): Reserved => {
    // The claim first: a replay (or a conflict) answers before any budget question.
    if (a.claim !== undefined) {
      const { scope, key, fingerprint } = a.claim
      const claimed = idempotency.claimSync(scope, key, fingerprint, a.request.id, a.hold.deadline, a.now, a.epoch)
      if (claimed._tag !== "Claimed") abort({ _tag: "ClaimLost", outcome: claimed })
    }
    crashPoint("claim")
    // Sized on every scope's window (project, key, end user) as it is inside this transaction: no
    // other hold can come in between. A refusal names the first scope without room (spec/scopes.ts).
    const sized = sizeInScopes(a.sizing, ledger.scopeWindowsSync(a.hold))
    if (sized._tag === "OverBudget") abort(sized)
    const { outputCap, reservation } = sized as Extract<typeof sized, { _tag: "Fits" }>
    requests.insertPendingSync({ ...a.request, creditsReserved: reservation })
    // The guarded statements stay the rule (spent + reserved ≤ cap in each scope), whatever the sizing
    // said; a refusal aborts, and the transaction's rollback undoes every scope's hold (all or none).
    // The hold and the claim carry this process's epoch from their INSERTs.
    const held = ledger.reserveSync({ ...a.hold, amount: reservation }, a.now, a.epoch)
    if (held !== "held") abort({ _tag: "OverBudget", message: holdRefusedMessage(reservation, a.hold.period, held), param: held })
    return { outputCap, reservation }
  }

  const settle = (a: SettleArgs): void => {
    // The charge the ledger posted (clamped to the hold it stored), not the one asked for: the request
    // row and the receipt must say the same.
    const receipt = ledger.settleSync(a, a.now)
    requests.completeSync(a.hold.requestId, {
      route: a.route,
      creditsCharged: receipt.credits_charged,
      receiptId: a.receiptId,
      verification: a.verification,
      attempts: a.attempts,
      completedAt: a.now
    })
    if (a.idempotent !== undefined) {
      idempotency.finishSync(a.idempotent.scope, a.idempotent.key, a.hold.requestId, a.idempotent.result, a.idempotent.ttlMs, a.now)
    }
    assertWindow(receipt.project_id, receipt.period, `settling ${a.hold.reservationId}`)
  }

  const abandon = (a: AbandonArgs): void => {
    ledger.releaseSync(a.reservationId, a.now)
    requests.failSync(a.requestId, { code: a.code, message: a.message, attempts: a.attempts, completedAt: a.now })
    if (a.idempotent !== undefined) idempotency.releaseSync(a.idempotent.scope, a.idempotent.key, a.requestId)
    if (options.assertInvariants === true) {
      const w = ledger.reservationWindowSync(a.reservationId)
      if (w !== undefined) assertWindow(w.projectId, w.period, `abandoning ${a.reservationId}`)
    }
  }

  const extend = (a: ExtendArgs): void => {
    for (const s of a.streams) {
      ledger.extendHoldSync(s.reservationId, a.deadline)
      if (s.idempotent !== undefined) idempotency.extendClaimSync(s.idempotent.scope, s.idempotent.key, s.requestId, a.deadline)
    }
  }

  const expire = (a: ExpireArgs): number => {
    let voided = 0
    for (const hold of ledger.expiredSync(a.now)) {
      // Guarded: a hold its own call resolved meanwhile stays as it is.
      if (!ledger.releaseSync(hold.id, a.now)) continue
      requests.failSync(hold.request_id, { ...a.failure, attempts: [], completedAt: a.now })
      idempotency.releaseRequestSync(hold.request_id)
      voided++
    }
    return voided
  }

  const heartbeat = (a: HeartbeatArgs): void => epochs.heartbeatSync(a.epoch, a.now, a.marks)

  return { reserve, settle, abandon, extend, expire, heartbeat }
}
