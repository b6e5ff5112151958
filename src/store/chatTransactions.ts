/**
 * The governed call's four write transactions (DESIGN.md §3), as synchronous bodies over one
 * better-sqlite3 connection. Their arguments and results are plain data, so the same bodies run on
 * the main thread (`Sqlite.transact`, an in-memory store) or in the store worker that owns the write
 * connection of a file store (src/store/storeWorker.ts), batched and group-committed either way:
 *
 * - reserve: the idempotency claim, the output cap and hold sized on the window read in the same
 *   transaction, the pending request row and the budget hold;
 * - settle: the charge, the signed receipt, the request's completion and the stored idempotent result;
 * - abandon: void the hold, fail the request, free the idempotency key (nothing was charged);
 * - extend: push the holds and claims of calls in flight a TTL ahead;
 * - heartbeat: this process's epoch is alive, and its open streams' progress marks (src/store/epochs.ts).
 *
 * A refused reservation rolls back and aborts with `ReserveRefused`, data the caller turns into its reply.
 */
import type BetterSqlite3 from "better-sqlite3"
import { type ClaimOutcome, makeIdempotencyWrites, type Scope, type StoredResult } from "../services/IdempotencyStore.ts"
import { type Hold, makeLedgerWrites, type Sealer, type Settlement } from "../services/Ledger.ts"
import { type Attempt, makeRequestWrites, type NewRequest } from "../services/Requests.ts"
import { sizeReservation, type SizingRequest } from "../services/budgetSizing.ts"
import { crashPoint } from "../testing/crashPoint.ts"
import { makeEpochWrites, type ProgressMark } from "./epochs.ts"
import type { Abort } from "./syncTransactions.ts"

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
 */
export const mustSync = (op: ChatOp, args: unknown): boolean => op !== "reserve" || (args as ReserveArgs).request.stream

export const makeChatTransactions = (db: BetterSqlite3.Database, sealer: Sealer): ChatTransactions => {
  const ledger = makeLedgerWrites(db, sealer)
  const requests = makeRequestWrites(db)
  const idempotency = makeIdempotencyWrites(db)
  const epochs = makeEpochWrites(db)

  const reserve = (a: ReserveArgs, abort: Abort<ReserveRefused>): Reserved => {
    // The claim first: a replay (or a conflict) answers before any budget question.
    if (a.claim !== undefined) {
      const { scope, key, fingerprint } = a.claim
      const claimed = idempotency.claimSync(scope, key, fingerprint, a.request.id, a.hold.deadline, a.now)
      if (claimed._tag !== "Claimed") abort({ _tag: "ClaimLost", outcome: claimed })
    }
    crashPoint("claim")
    // Sized on the window as it is inside this transaction: no other hold can come in between.
    const window = ledger.windowSync(a.hold.projectId, a.hold.period)
    const sized = sizeReservation(a.sizing, window.cap, Math.max(0, window.cap - window.spent - window.reserved))
    if (sized._tag === "OverBudget") abort(sized)
    const { outputCap, reservation } = sized as Extract<typeof sized, { _tag: "Fits" }>
    requests.insertPendingSync({ ...a.request, creditsReserved: reservation })
    // The guarded UPDATE stays the rule (spent + reserved ≤ cap), whatever the sizing said.
    ledger.reserveSync({ ...a.hold, amount: reservation }, a.now, (e) => abort({ _tag: "OverBudget", message: e.message, param: null }))
    epochs.markReservedSync(a.epoch, a.hold.reservationId, a.claim === undefined ? undefined : { scope: a.claim.scope, key: a.claim.key, requestId: a.request.id })
    return { outputCap, reservation }
  }

  const settle = (a: SettleArgs): void => {
    ledger.settleSync(a, a.now)
    requests.completeSync(a.hold.requestId, {
      route: a.route,
      creditsCharged: a.charge,
      receiptId: a.receiptId,
      verification: a.verification,
      attempts: a.attempts,
      completedAt: a.now
    })
    if (a.idempotent !== undefined) {
      idempotency.finishSync(a.idempotent.scope, a.idempotent.key, a.hold.requestId, a.idempotent.result, a.idempotent.ttlMs, a.now)
    }
  }

  const abandon = (a: AbandonArgs): void => {
    ledger.releaseSync(a.reservationId, a.now)
    requests.failSync(a.requestId, { code: a.code, message: a.message, attempts: a.attempts, completedAt: a.now })
    if (a.idempotent !== undefined) idempotency.releaseSync(a.idempotent.scope, a.idempotent.key, a.requestId)
  }

  const extend = (a: ExtendArgs): void => {
    for (const s of a.streams) {
      ledger.extendHoldSync(s.reservationId, a.deadline)
      if (s.idempotent !== undefined) idempotency.extendClaimSync(s.idempotent.scope, s.idempotent.key, s.requestId, a.deadline)
    }
  }

  const heartbeat = (a: HeartbeatArgs): void => epochs.heartbeatSync(a.epoch, a.now, a.marks)

  return { reserve, settle, abandon, extend, heartbeat }
}
