/**
 * The store port (`ChatStoreApi`, src/store/ChatStore.ts) on PostgreSQL: the same five transactions
 * as src/store/chatTransactions.ts, with the same arguments and results, for several instances on
 * one database. What keeps the guarantees when instances race (READ COMMITTED):
 *
 * - reserve: the idempotency claim is one INSERT … ON CONFLICT DO NOTHING on the primary key (a
 *   racing claim waits for the first to commit or roll back, then loses or wins); the hold is ONE
 *   guarded UPDATE `spent + reserved + amount ≤ cap`, which PostgreSQL evaluates again on the locked,
 *   latest version of the window row, so no interleaving can overspend. It runs last, just before
 *   COMMIT, so the hot row is locked for one round trip. The sizing reads the window without a lock:
 *   if another instance took budget meanwhile, the guard refuses (402), it never overspends.
 * - settle: the hold moves `held → settled` once (guarded on its state); the project's chain head row
 *   is locked (upserted FOR UPDATE) before its receipt is sealed, so settlements of several instances
 *   append to one chain, one after the other; the charge, the receipt, the head, the request's
 *   completion and the idempotent result commit together.
 * - reserve marks the claim and the hold with the process's epoch, and heartbeat writes the epoch's
 *   heartbeat and open streams' progress marks (src/store/epochs.ts): a survivor or a restart resolves
 *   a dead epoch's holds through settle and abandon (src/services/Recovery.ts), each guarded on the
 *   hold's state, so two instances resolving one dead epoch never resolve a hold twice.
 * - expire: the sweep takes expired holds with FOR UPDATE SKIP LOCKED and moves each `held → voided`
 *   once: several instances sweeping at once split the work, none voids a hold twice.
 *
 * A serialization failure (40001) or deadlock (40P01) rolls the transaction back; it is run again
 * after a jittered backoff and counted (`pgRetries`, exported in /metrics).
 */
import { SqlClient, type SqlError } from "@effect/sql"
import { Duration, Effect, Layer, Option } from "effect"
import { GENESIS_HASH } from "../../spec/receipt.ts"
import { available, checkWindow } from "../../spec/ledger.ts"
import { holdRefusedMessage, sizeReservation } from "../domain/budgetSizing.ts"
import { Settings } from "../domain/config.ts"
import { StoreUnavailable } from "../domain/errors.ts"
import { type AbandonArgs, InvariantViolated, type ExpireArgs, type ExtendArgs, type HeartbeatArgs, type ReserveArgs, type Reserved, type ReserveRefused, type SettleArgs } from "./chatTransactions.ts"
import { ChatStore, type ChatStoreApi, ReceiptKey } from "./ChatStore.ts"
import { PgConnectionsTracker } from "./pgPool.ts"
import { fastestSealer } from "./sodium.ts"
import { faultOf, storeUnavailable } from "./storeFaults.ts"
import { asBuffer, type ClaimOutcome, type IdempotencyRow, outcomeOf } from "./idempotencyStatements.ts"
import { unsignedReceipt, type WindowFactsRow, windowFactsOf } from "./ledgerStatements.ts"

/** Transactions run again after a serialization failure or a deadlock, by SQLSTATE (read by /metrics). */
export const pgRetries: Record<"40001" | "40P01", number> = { "40001": 0, "40P01": 0 }

const RETRY_LIMIT = 10

const retryableCode = (e: SqlError.SqlError): "40001" | "40P01" | undefined => {
  const code = (e.cause as { code?: unknown } | undefined)?.code
  return code === "40001" || code === "40P01" ? code : undefined
}

/** A transaction that must not be repeated lost its connection mid-way: whether it committed is unknown. */
class MayHaveCommitted {
  constructor(readonly reason: string) {}
}

/** The advisory lock class of reservations' fences (with the reservation id's hash). */
const RESERVATION_FENCE = 7301

/** How often abandonments the database could not take are tried again. */
const OWED_RETRY_MS = 250

/** Holds the sweep voids per transaction. */
const SWEEP_BATCH = 500



export const makePgChatStore = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const signer = yield* ReceiptKey
  const seal = fastestSealer(signer.signingKey)
  const { assertInvariants, pgAcquireTimeoutMs } = yield* Settings
  const connections = yield* PgConnectionsTracker

  /** Assertion mode (TOLLGATE_ASSERT): the window's rules (spec/ledger.ts `checkWindow`) on the rows this transaction wrote. */
  const assertWindow = (projectId: string, period: string, after: string) =>
    !assertInvariants
      ? Effect.void
      : Effect.flatMap(
          sql<WindowFactsRow>`
            SELECT (SELECT budget_credits FROM projects WHERE id = ${projectId}) AS cap,
                   (SELECT updated_at FROM projects WHERE id = ${projectId}) AS cap_changed_at,
                   (SELECT spent FROM budget_windows WHERE project_id = ${projectId} AND period = ${period}) AS spent,
                   (SELECT reserved FROM budget_windows WHERE project_id = ${projectId} AND period = ${period}) AS reserved,
                   (SELECT COALESCE(SUM(credits_charged), 0) FROM receipts WHERE project_id = ${projectId} AND period = ${period}) AS receipt_sum,
                   (SELECT COALESCE(SUM(amount), 0) FROM reservations WHERE project_id = ${projectId} AND period = ${period} AND state = 'held') AS held_sum,
                   (SELECT MAX(created_at) FROM reservations WHERE project_id = ${projectId} AND period = ${period}) AS last_hold_at`,
          ([r]) => {
            const findings = checkWindow(windowFactsOf(r!))
            return findings.length === 0
              ? Effect.void
              : Effect.die(new InvariantViolated(`TOLLGATE_ASSERT: window ${projectId}/${period} after ${after}: ${findings.map((f) => `${f.invariant} (${f.detail})`).join("; ")}`))
          }
        )

  /**
   * Run `body` in one transaction; again (after a jittered backoff doubling from 2 ms) when PostgreSQL
   * aborted it for a serialization failure or a deadlock. A connection refused, dropped or not had
   * within the bound (src/store/storeFaults.ts) is retried until `pgAcquireTimeoutMs` has passed —
   * always when no connection was had (nothing ran), and after a connection lost mid-transaction only
   * when `repeatable` (the transaction recognizes its own earlier commit) — then raised as the defect
   * `StoreUnavailable`, which the call answers 503. Any other store error is a defect. Once started it
   * is uninterruptible: it will commit or roll back, and the caller sees which.
   */
  const transact = <A, E>(body: Effect.Effect<A, E>, repeatable = true): Effect.Effect<A, Exclude<E, SqlError.SqlError>> =>
    Effect.clockWith((clock) => {
      const deadline = clock.unsafeCurrentTimeMillis() + pgAcquireTimeoutMs
      const attempt = (n: number): Effect.Effect<A, E> =>
        (sql.withTransaction(body) as Effect.Effect<A, E>).pipe(
          // @effect/sql raises a failed COMMIT or ROLLBACK as a defect: the same store error here.
          Effect.catchSomeDefect((d) => ((d as { _tag?: unknown })._tag === "SqlError" ? Option.some(Effect.fail(d as E)) : Option.none())),
          Effect.catchIf(
            (e) => (e as { _tag?: unknown })._tag === "SqlError",
            (e): Effect.Effect<A, E> => {
              const code = retryableCode(e as SqlError.SqlError)
              if (code !== undefined && n < RETRY_LIMIT) {
                pgRetries[code]++
                return Effect.zipRight(Effect.sleep(Duration.millis(Math.min(200, 2 * 2 ** n) * (0.5 + Math.random()))), attempt(n + 1))
              }
              const fault = faultOf(e)
              if (fault === undefined) return Effect.die(e)
              connections.failed(fault.reason)
              const delay = Math.min(250, 10 * 2 ** n) * (0.5 + Math.random())
              if ((fault.when === "before" || repeatable) && clock.unsafeCurrentTimeMillis() + delay < deadline) {
                return Effect.zipRight(Effect.sleep(Duration.millis(delay)), attempt(n + 1))
              }
              connections.gaveUp(fault.reason)
              return Effect.zipRight(
                Effect.logWarning(`store: a transaction gave up after ${n + 1} attempt(s): ${fault.reason}`),
                Effect.die(fault.when === "during" && !repeatable ? new MayHaveCommitted(fault.reason) : storeUnavailable(fault.reason))
              )
            }
          )
        )
      return attempt(0).pipe(
        Effect.tap(() => connections.succeeded()),
        Effect.uninterruptible
      ) as Effect.Effect<A, Exclude<E, SqlError.SqlError>>
    })

  const selectLiveClaim = (a: NonNullable<ReserveArgs["claim"]>, now: number) =>
    sql<IdempotencyRow>`SELECT fingerprint, request_id, state, status, content_type, body, expires_at FROM idempotency
      WHERE project_id = ${a.scope.projectId} AND environment = ${a.scope.environment} AND key = ${a.key} AND expires_at > ${now}`

  /** The atomic claim (one INSERT on the primary key); what it met when another claim holds the key. */
  const claim = (a: ReserveArgs): Effect.Effect<ClaimOutcome, SqlError.SqlError> =>
    Effect.gen(function* () {
      const c = a.claim!
      const insert = sql<{ one: number }>`INSERT INTO idempotency (project_id, environment, key, fingerprint, request_id, state, created_at, expires_at, epoch)
        VALUES (${c.scope.projectId}, ${c.scope.environment}, ${c.key}, ${c.fingerprint}, ${a.request.id}, 'in_flight', ${a.now}, ${a.hold.deadline}, ${a.epoch})
        ON CONFLICT DO NOTHING RETURNING 1 AS one`
      // A few rounds: between a lost INSERT and the read, the holder may release the key (its call failed).
      for (let round = 0; round < 3; round++) {
        if ((yield* insert).length === 1) return { _tag: "Claimed" } as const
        const expired = yield* sql`DELETE FROM idempotency WHERE project_id = ${c.scope.projectId} AND environment = ${c.scope.environment}
          AND key = ${c.key} AND expires_at <= ${a.now} RETURNING 1 AS one`
        if (expired.length > 0 && (yield* insert).length === 1) return { _tag: "Claimed" } as const
        const live = yield* selectLiveClaim(c, a.now)
        if (live[0] !== undefined) return outcomeOf(live[0], c.fingerprint)
      }
      return yield* Effect.dieMessage(`idempotency key ${c.key}: claim neither won nor found after 3 rounds`)
    })

  const reserve = (a: ReserveArgs): Effect.Effect<Reserved, ReserveRefused> =>
    transact(
      Effect.gen(function* () {
        if (a.claim !== undefined) {
          const claimed = yield* claim(a)
          if (claimed._tag !== "Claimed") return yield* Effect.fail<ReserveRefused>({ _tag: "ClaimLost", outcome: claimed })
        }
        const { projectId, period } = a.hold
        // Every reservation commits synchronously, unlike SQLite's unsynced non-streamed one
        // (chatTransactions.ts, `mustSync`): there the only crash that loses it also ends its call;
        // here the database can crash while the gateway lives on, calls the upstream and then finds
        // no hold to charge — a lost charge.
        const r = a.request
        // ONE statement: the guard, and the request row and the hold only if it held. The window row
        // is locked from here to COMMIT: one round trip.
        const guarded = (reservation: number) => sql<{ n: number }>`WITH held AS (
            UPDATE budget_windows SET reserved = reserved + ${reservation}
            WHERE project_id = ${projectId} AND period = ${period}
              AND spent + reserved + ${reservation} <= (SELECT budget_credits FROM projects WHERE id = ${projectId})
            RETURNING 1),
          request AS (
            INSERT INTO requests (id, project_id, environment, key_id, endpoint, model, route, stream, status,
              idempotency_key, rate_card_version, credits_reserved, created_at)
            SELECT ${r.id}, ${r.projectId}, ${r.environment}, ${r.keyId}, ${r.endpoint}, ${r.model}, ${r.route}, ${r.stream ? 1 : 0}::bigint, 'pending',
              ${r.idempotencyKey}, ${r.rateCardVersion}, ${reservation}::bigint, ${r.createdAt}::bigint
            WHERE EXISTS (SELECT 1 FROM held)),
          hold AS (
            INSERT INTO reservations (id, request_id, project_id, period, amount, state, deadline, created_at, epoch)
            SELECT ${a.hold.reservationId}, ${a.hold.requestId}, ${projectId}, ${period}, ${reservation}::bigint, 'held', ${a.hold.deadline}::bigint, ${a.now}::bigint, ${a.epoch}::bigint
            WHERE EXISTS (SELECT 1 FROM held)),
          -- The fence of the reservation, held to COMMIT: a void after a lost connection waits for it (voidedReservation).
          fence AS (SELECT pg_advisory_xact_lock(${RESERVATION_FENCE}, hashtext(${a.hold.reservationId})))
          SELECT COUNT(*) AS n FROM held, fence`
        // A call that names its max_tokens holds the same whatever the window has left (the rule,
        // `decideChainCap`: its cap and hold do not depend on the remaining budget, only whether it
        // fits): the guard is tried first, and the window read only when it refuses — one round trip
        // fewer for such a call. What a refusal answers is decided below, on the read, as before.
        const unbounded = a.sizing.requested === undefined ? undefined : sizeReservation(a.sizing, Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)
        if (unbounded?._tag === "Fits" && (yield* guarded(unbounded.reservation))[0]!.n === 1) return { outputCap: unbounded.outputCap, reservation: unbounded.reservation }
        const [w] = yield* sql<{ cap: number; spent: number | null; reserved: number | null }>`
          SELECT p.budget_credits AS cap, w.spent AS spent, w.reserved AS reserved
          FROM projects p LEFT JOIN budget_windows w ON w.project_id = p.id AND w.period = ${period}
          WHERE p.id = ${projectId}`
        const cap = w?.cap ?? 0
        const sized = sizeReservation(a.sizing, cap, available({ cap, spent: w?.spent ?? 0, reserved: w?.reserved ?? 0 }))
        if (sized._tag === "OverBudget") return yield* Effect.fail<ReserveRefused>(sized)
        const { outputCap, reservation } = sized
        let held = (yield* guarded(reservation))[0]!.n === 1
        if (!held && w?.spent === null) {
          // The window did not exist yet (first hold of the month): open it and try once more.
          yield* sql`INSERT INTO budget_windows (project_id, period, spent, reserved) VALUES (${projectId}, ${period}, 0, 0) ON CONFLICT DO NOTHING`
          held = (yield* guarded(reservation))[0]!.n === 1
        }
        if (!held) return yield* Effect.fail<ReserveRefused>({ _tag: "OverBudget", message: holdRefusedMessage(reservation, period), param: null })
        return { outputCap, reservation }
      }),
      false
    ).pipe(
      // Its connection lost mid-way, the reservation may have committed: void what it may have taken
      // (the hold, the claim; a no-op when it did not commit), then answer that the store is unavailable.
      Effect.catchSomeDefect((d) =>
        d instanceof MayHaveCommitted
          ? Option.some(Effect.zipRight(Effect.catchAllDefect(abandon(voidedReservation(a, d.reason)), () => Effect.void), Effect.die(storeUnavailable(d.reason))))
          : Option.none()
      )
    )

  /**
   * What voids a reservation that may have committed, had its connection not been lost. Fenced: the
   * lost transaction may still be committing on its server process; the void runs once that
   * transaction's fence is free (it committed or rolled back), else it is owed and tried again.
   */
  const voidedReservation = (a: ReserveArgs, reason: string): AbandonArgs & { readonly fenced: true } => ({
    fenced: true,
    now: a.now,
    reservationId: a.hold.reservationId,
    requestId: a.request.id,
    code: "store_unavailable",
    message: `The gateway's database connection was lost while reserving (${reason}); nothing was charged.`,
    attempts: [],
    idempotent: a.claim === undefined ? undefined : { scope: a.claim.scope, key: a.claim.key }
  })

  const settle = (s: SettleArgs): Effect.Effect<void> =>
    transact(
      Effect.gen(function* () {
        // ONE statement: this call's rows — the hold resolved once, the request completed, the
        // idempotent result stored — and the project's two hot rows, locked from here to COMMIT (one
        // more round trip and a signature): the charge posted to the window, and the chain head, one
        // chain per project however many instances settle into it. Locks in the order every writer
        // takes them: the hold, the window, the head.
        const idem = s.idempotent
        const [row] = yield* sql<{ amount: number; charge: number; project_id: string; period: string; seq: number | null; hash: string | null }>`WITH resolved AS (
            UPDATE reservations SET state = 'settled', resolved_at = ${s.now}, charge = LEAST(${s.charge}::bigint, amount)
            WHERE id = ${s.hold.reservationId} AND state = 'held' RETURNING amount, charge, project_id, period),
          completed AS (
            UPDATE requests SET status = 'completed', route = ${s.route}, credits_charged = (SELECT charge FROM resolved), receipt_id = ${s.receiptId},
              verification = ${JSON.stringify(s.verification)}, attempts = ${JSON.stringify(s.attempts)}, completed_at = ${s.now}
            WHERE id = ${s.hold.requestId} AND status = 'pending' AND EXISTS (SELECT 1 FROM resolved)),
          finished AS (
            UPDATE idempotency SET state = 'finished', status = ${idem?.result.status ?? null}, content_type = ${idem?.result.contentType ?? null},
              body = ${idem === undefined ? null : asBuffer(idem.result.body)}, expires_at = ${s.now + (idem?.ttlMs ?? 0)}
            WHERE ${idem !== undefined} AND project_id = ${idem?.scope.projectId ?? ""} AND environment = ${idem?.scope.environment ?? ""}
              AND key = ${idem?.key ?? ""} AND request_id = ${s.hold.requestId} AND state = 'in_flight' AND expires_at > ${s.now}
              AND EXISTS (SELECT 1 FROM resolved)),
          posted AS (
            UPDATE budget_windows w SET spent = w.spent + r.charge, reserved = w.reserved - r.amount
            FROM resolved r WHERE w.project_id = r.project_id AND w.period = r.period RETURNING w.project_id),
          head AS (
            INSERT INTO chain_heads (project_id, seq, hash) SELECT project_id, 0, ${GENESIS_HASH} FROM posted
            ON CONFLICT (project_id) DO UPDATE SET seq = chain_heads.seq RETURNING seq, hash)
          SELECT r.amount, r.charge, r.project_id, r.period, h.seq, h.hash FROM resolved r LEFT JOIN head h ON TRUE`
        if (row === undefined) {
          // This settlement's own earlier attempt committed before its connection was lost: done.
          const [mine] = yield* sql<{ one: number }>`SELECT 1 AS one FROM requests WHERE id = ${s.hold.requestId} AND receipt_id = ${s.receiptId} AND status = 'completed'`
          if (mine !== undefined) return
          return yield* Effect.dieMessage(`reservation ${s.hold.reservationId} was already resolved`)
        }
        const charge = row.charge
        const head = row.seq === null || row.hash === null ? undefined : { seq: row.seq, hash: row.hash }
        if (head === undefined) return yield* Effect.dieMessage(`no budget window ${row.period} for project ${row.project_id}`)
        const seq = head.seq + 1
        const unsigned = unsignedReceipt(s, { ...row, charge }, { seq, prevHash: head.hash, now: s.now, keyId: signer.keyId })
        const { receipt, body } = seal(unsigned)
        yield* sql`WITH appended AS (
            INSERT INTO receipts (id, request_id, project_id, environment, period, seq, credits_charged, rate_card_version,
              body, prev_hash, hash, signature, signing_key_id, created_at,
              route, input_tokens, cached_input_tokens, output_tokens, reasoning_tokens)
            VALUES (${receipt.receipt_id}, ${receipt.request_id}, ${receipt.project_id}, ${receipt.environment}, ${receipt.period},
              ${seq}, ${charge}, ${receipt.rate_card_version}, ${body}, ${receipt.prev_hash}, ${receipt.hash},
              ${receipt.signature}, ${receipt.signing_key_id}, ${s.now},
              ${s.route}, ${s.tokens.input}, ${s.tokens.cached_input}, ${s.tokens.output}, ${s.tokens.reasoning}))
          UPDATE chain_heads SET seq = ${seq}, hash = ${receipt.hash} WHERE project_id = ${row.project_id}`
        yield* assertWindow(row.project_id, row.period, `settling ${s.hold.reservationId}`)
      })
    )

  const failRequest = (requestId: string, f: { code: string; message: string; attempts: ReadonlyArray<unknown>; completedAt: number }) =>
    sql`UPDATE requests SET status = 'failed', credits_charged = 0, error_code = ${f.code}, error_message = ${f.message},
        attempts = ${JSON.stringify(f.attempts)}, completed_at = ${f.completedAt}
      WHERE id = ${requestId} AND status = 'pending'`

  /**
   * Void a hold, fail its request and free its key. When the database cannot take it within the bound,
   * it is owed: retried in the background until it lands (the call is answered 503 meanwhile, with
   * nothing charged), so a hold does not wait for the expiry sweep, nor its key for the TTL.
   */
  const abandon = (a: AbandonArgs): Effect.Effect<void> =>
    Effect.tapDefect(abandonOnce(a), (d) => (d instanceof StoreUnavailable ? owe(a) : Effect.void))

  /** Voids owed, by reservation; paid by one fiber (in the store's scope) that runs only while any is owed. */
  const owed = new Map<string, AbandonArgs>()
  let paying = false
  const storeScope = yield* Effect.scope
  const payOwed = Effect.suspend(() =>
    Effect.forEach(
      [...owed.values()],
      (a) => Effect.matchCauseEffect(abandonOnce(a), { onFailure: () => Effect.void, onSuccess: () => Effect.sync(() => owed.delete(a.reservationId)) }),
      { discard: true }
    )
  )
  const owe = (a: AbandonArgs) =>
    Effect.suspend(() => {
      owed.set(a.reservationId, a)
      if (paying) return Effect.void
      paying = true
      const pay = Effect.zipRight(Effect.sleep(Duration.millis(OWED_RETRY_MS)), payOwed).pipe(
        Effect.repeat({ until: () => owed.size === 0 }),
        Effect.ensuring(Effect.sync(() => void (paying = false)))
      )
      return Effect.asVoid(Effect.forkIn(pay, storeScope))
    })

  const abandonOnce = (a: AbandonArgs & { readonly fenced?: true }): Effect.Effect<void> =>
    transact(
      Effect.gen(function* () {
        if (a.fenced === true) {
          const [fence] = yield* sql<{ free: boolean }>`SELECT pg_try_advisory_xact_lock(${RESERVATION_FENCE}, hashtext(${a.reservationId})) AS free`
          if (fence?.free !== true) return yield* Effect.die(storeUnavailable("a lost reservation is still committing"))
        }
        const [row] = yield* sql<{ amount: number; project_id: string; period: string }>`
          UPDATE reservations SET state = 'voided', charge = 0, resolved_at = ${a.now}
          WHERE id = ${a.reservationId} AND state = 'held' RETURNING amount, project_id, period`
        yield* failRequest(a.requestId, { code: a.code, message: a.message, attempts: a.attempts, completedAt: a.now })
        if (a.idempotent !== undefined) {
          yield* sql`DELETE FROM idempotency WHERE project_id = ${a.idempotent.scope.projectId} AND environment = ${a.idempotent.scope.environment}
            AND key = ${a.idempotent.key} AND request_id = ${a.requestId} AND state = 'in_flight'`
        }
        if (row !== undefined) {
          yield* sql`UPDATE budget_windows SET reserved = reserved - ${row.amount} WHERE project_id = ${row.project_id} AND period = ${row.period}`
          yield* assertWindow(row.project_id, row.period, `abandoning ${a.reservationId}`)
        }
      })
    )

  const extend = (a: ExtendArgs): Effect.Effect<void> =>
    a.streams.length === 0
      ? Effect.void
      : transact(
          Effect.forEach(
            a.streams,
            (s) =>
              Effect.zipRight(
                sql`UPDATE reservations SET deadline = ${a.deadline} WHERE id = ${s.reservationId} AND state = 'held'`,
                s.idempotent === undefined
                  ? Effect.succeed([])
                  : sql`UPDATE idempotency SET expires_at = ${a.deadline} WHERE project_id = ${s.idempotent.scope.projectId}
                      AND environment = ${s.idempotent.scope.environment} AND key = ${s.idempotent.key}
                      AND request_id = ${s.requestId} AND state = 'in_flight'`
              ),
            { discard: true }
          )
        )

  /**
   * This epoch is alive (its `instances` row), and each open stream's progress mark (src/store/epochs.ts),
   * written on its hold while it is still held: what a survivor charges if this process dies.
   */
  const heartbeat = (a: HeartbeatArgs): Effect.Effect<void> =>
    transact(
      Effect.zipRight(
        sql`UPDATE instances SET heartbeat_at = ${a.now} WHERE epoch = ${a.epoch}`,
        Effect.forEach(a.marks, (m) => sql`UPDATE reservations SET progress = ${JSON.stringify(m.mark)} WHERE id = ${m.reservationId} AND state = 'held'`, {
          discard: true
        })
      )
    )

  /** One batch of the sweep: the expired holds no other sweeper holds, each voided once. */
  const expireBatch = (a: ExpireArgs): Effect.Effect<number> =>
    transact(
      Effect.gen(function* () {
        const voided = yield* sql<{ request_id: string; amount: number; project_id: string; period: string }>`
          UPDATE reservations SET state = 'voided', charge = 0, resolved_at = ${a.now}
          WHERE state = 'held' AND id IN (
            SELECT id FROM reservations WHERE state = 'held' AND deadline <= ${a.now}
            ORDER BY id LIMIT ${SWEEP_BATCH} FOR UPDATE SKIP LOCKED)
          RETURNING request_id, amount, project_id, period`
        if (voided.length === 0) return 0
        const requestIds = voided.map((v) => v.request_id)
        yield* sql`UPDATE requests SET status = 'failed', credits_charged = 0, error_code = ${a.failure.code},
            error_message = ${a.failure.message}, attempts = '[]', completed_at = ${a.now}
          WHERE id IN ${sql.in(requestIds)} AND status = 'pending'`
        yield* sql`DELETE FROM idempotency WHERE request_id IN ${sql.in(requestIds)} AND state = 'in_flight'`
        // The windows last, in one order (project, period), so two sweepers never wait on each other in a cycle.
        const released = new Map<string, { projectId: string; period: string; amount: number }>()
        for (const v of voided) {
          const k = `${v.project_id}\u0000${v.period}`
          const w = released.get(k) ?? { projectId: v.project_id, period: v.period, amount: 0 }
          w.amount += v.amount
          released.set(k, w)
        }
        for (const w of [...released.values()].sort((x, y) => (x.projectId + x.period < y.projectId + y.period ? -1 : 1))) {
          yield* sql`UPDATE budget_windows SET reserved = reserved - ${w.amount} WHERE project_id = ${w.projectId} AND period = ${w.period}`
        }
        return voided.length
      })
    )

  const expire = (a: ExpireArgs): Effect.Effect<number> =>
    Effect.gen(function* () {
      let total = 0
      for (;;) {
        const n = yield* expireBatch(a)
        total += n
        if (n < SWEEP_BATCH) return total
      }
    })

  const api: ChatStoreApi = {
    reserve,
    settle,
    abandon,
    extend,
    expire,
    heartbeat,
    health: connections.health,
    runsIn: "inline"
  }
  return api
})

/** ChatStore on PostgreSQL. */
export const PgChatStoreLive: Layer.Layer<ChatStore, never, SqlClient.SqlClient | ReceiptKey | Settings> = Layer.scoped(ChatStore, makePgChatStore)
