/**
 * The store port (`ChatStoreApi`, src/store/ChatStore.ts) on PostgreSQL: the same five transactions
 * as src/store/chatTransactions.ts, with the same arguments and results, for several instances on
 * one database. Each governed transaction is ONE statement — a server-side function installed by
 * migration 0008 (src/store/migrations.ts), called in its own implicit transaction: one round trip,
 * its return its commit (docs/decisions/0043). What keeps the guarantees when instances race (READ COMMITTED):
 *
 * - reserve (`tollgate_reserve_many`, migrations 0024 and 0028): the idempotency claim is one INSERT … ON
 *   CONFLICT DO NOTHING on the primary key (a racing claim waits for the first to commit or roll back,
 *   then loses or wins), every claim of a batch before any window is locked; the hold's guard
 *   `spent + reserved + amount ≤ cap` is decided on the window row locked FOR UPDATE (its latest
 *   version) and the batch's earlier holds, so no interleaving can overspend. The hold is sized
 *   as if the window were unbounded, which is what sizing on the window gives whenever the guard
 *   accepts it; refused, the function answers the window's figures and the call is sized on them and
 *   tried once more (a second round trip, only near the cap).
 * - settle (`tollgate_settle`): the hold moves `held → settled` once (its row locked, its state and
 *   amount checked); the receipt is sealed here before the statement, on the project's chain head this
 *   instance last saw, and the function appends it only if that is still the head (locked): else it
 *   writes nothing and answers the head, and the receipt is sealed again. One project's settlements
 *   go through one lane of this instance, so they do not race each other for the head; a head other
 *   instances keep moving is locked first (the chain's writer lock, `tollgate_lock_chains`, migration
 *   0026, in one transaction with the settlement). The charge, the receipt, the head, the request's
 *   completion and the idempotent result commit together.
 * - reserve marks the claim and the hold with the process's epoch, and heartbeat writes the epoch's
 *   heartbeat and open streams' progress marks (src/store/epochs.ts): a survivor or a restart resolves
 *   a dead epoch's holds through settle and abandon (src/services/Recovery.ts), each guarded on the
 *   hold's state, so two instances resolving one dead epoch never resolve a hold twice.
 * - expire: the sweep takes expired holds with FOR UPDATE SKIP LOCKED and moves each `held → voided`
 *   once: several instances sweeping at once split the work, none voids a hold twice.
 *
 * - a lane's turn (`tollgate_turn`, migration 0025; docs/decisions/0054): the settlements and the
 *   reservations waiting on one lane go in one statement, one commit — settlements first, then the
 *   reservations in a block of their own under the hot-row bound, so a lock not had sheds them alone.
 *
 * - bounded waits (issue 40, item 3; docs/decisions/0046, 0051): a reservation waits for its lane's
 *   turn at most `TOLLGATE_PG_MAX_WAIT_MS` beyond the database's own time for a statement (judged when
 *   its batch is taken: a late one is never sent), finds at most `TOLLGATE_PG_MAX_QUEUED` others waiting on its lane (else it is refused at once),
 *   and its statement waits at most `TOLLGATE_PG_LOCK_TIMEOUT_MS` for a locked row (its transaction's
 *   `lock_timeout`, migration 0013: past it the statement rolls back whole). Each is a clean refusal
 *   before any money moved — 503 `server_overloaded` (a defect the Gateway answers), no hold, no
 *   claim, no request row. Settlements, voids, the sweep and the heartbeat are never shed: they end
 *   money already held.
 *
 * Locks are taken in one order by every writer: a settlement's chain writer locks (advisory, by the
 * project id's hash: migration 0026), holds (by id), windows (by project, period), heads (by project);
 * the writers that are not settlements start at the holds. A serialization failure (40001) or
 * deadlock (40P01) rolls the statement back; it is run again after a jittered backoff and counted
 * (`pgRetries`, exported in /metrics).
 */
import { SqlClient, type SqlError } from "@effect/sql"
import { Cause, Duration, Effect, Exit, Layer, Option, Runtime } from "effect"
import { checkWindow } from "../../spec/ledger.ts"
import type { ScopeKind } from "../../spec/scopes.ts"
import { holdRefusedMessage, type ScopeWindow, sizeInScopes, sizeReservation } from "../domain/budgetSizing.ts"
import { Settings } from "../domain/config.ts"
import { ServerOverloaded, StoreUnavailable } from "../domain/errors.ts"
import { type AbandonArgs, InvariantViolated, type ExpireArgs, type ExtendArgs, type HeartbeatArgs, type ReserveArgs, type Reserved, type ReserveRefused, type SettleArgs } from "./chatTransactions.ts"
import { ChatStore, type ChatStoreApi, ReceiptKey } from "./ChatStore.ts"
import { PgConnectionsTracker } from "./pgPool.ts"
import { fastestSealer } from "./sodium.ts"
import { faultOf, storeUnavailable } from "./storeFaults.ts"
import { asBuffer, type ClaimOutcome, outcomeOf } from "./idempotencyStatements.ts"
import { endUserAccount, keyAccount, unsignedReceipt, type WindowFactsRow, windowFactsOf } from "./ledgerStatements.ts"

/** Transactions run again after a serialization failure or a deadlock, by SQLSTATE (read by /metrics). */
export const pgRetries: Record<"40001" | "40P01", number> = { "40001": 0, "40P01": 0 }

const RETRY_LIMIT = 10

/**
 * Group commit's counts (issue 40, item 2): `tollgate_settle` statements that committed a batch, the
 * settlements they carried, and batches split after the database refused them (each call then run
 * alone: a split hides a failing call from its neighbours, and is logged — a bug's trace when it recurs);
 * and statements that found a chain head another instance had moved (`headMoved`: sealed again, a
 * round trip more — what several instances on one hot project cost, docs/decisions/0046); and
 * batches sealed under their chains' writer lock (`locked`, docs/decisions/0056); and settlements
 * put back in their lane's queue after a head moved, to go with its next turn (`requeued`, 0058).
 */
export const pgSettleBatches = { batches: 0, settlements: 0, splits: 0, headMoved: 0, locked: 0, requeued: 0 }

/** Reservation statements that answered (each one transaction) and the reservations they carried: their ratio is the mean batch. */
export const pgReserveBatches = { batches: 0, reservations: 0 }

/** Lane turns that carried settlements and reservations in one statement (`tollgate_turn`, docs/decisions/0054). */
export const pgTurns = { turns: 0 }

/**
 * Reservations shed (issue 40, item 3; docs/decisions/0046), by the bound that shed them: the lane's
 * queue was full (`queued`), a reservation waited for its lane's turn past the bound (`waited`), a hot
 * row's lock was not had within the bound (`lock`). Read by /metrics.
 */
export const pgShed = { queued: 0, waited: 0, lock: 0 }

/** How soon a shed call may try again (Retry-After). */
export const OVERLOAD_RETRY_AFTER_MS = 1000

/** The answer for a call the store shed: 503 server_overloaded, nothing held, retry with the same key. */
export const serverOverloaded = (why: string): ServerOverloaded =>
  new ServerOverloaded({
    message: `The gateway is overloaded: ${why}. Nothing is held for this call; retry after Retry-After with the same idempotency key.`,
    retryAfterMs: OVERLOAD_RETRY_AFTER_MS
  })

/** A statement PostgreSQL stopped because a lock was not had within `lock_timeout` (SQLSTATE 55P03): rolled back whole. */
const lockNotHad = (cause: Cause.Cause<unknown>): boolean =>
  [...Cause.defects(cause)].some((d) => (d as { _tag?: unknown })._tag === "SqlError" && ((d as SqlError.SqlError).cause as { code?: unknown } | undefined)?.code === "55P03")

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

/** The lane (of `lanes`: TOLLGATE_PG_LANES) of a project's settlements and reservations: always the same one. */
const laneIndex = (projectId: string, lanes: number): number => {
  let h = 0
  for (let i = 0; i < projectId.length; i++) h = (h * 31 + projectId.charCodeAt(i)) | 0
  return Math.abs(h) % lanes
}

/** Settlements one `tollgate_settle` call takes at most: one transaction, one WAL flush. */
const SETTLE_BATCH = 128

/** How many times in a row a settlement is sealed again on a head another instance moved, before it gives up. */
const HEAD_ROUNDS = 20

/**
 * A project whose head another instance moved is contended for this long (docs/decisions/0056): its
 * settlements, in a batch of at least `LOCKED_FIRST_BATCH`, take the chain's writer lock before they
 * are sealed instead of being sealed on a head that has most likely moved.
 */
const CONTENDED_MS = 1000
const LOCKED_FIRST_BATCH = 16

/** Adaptive shedding (docs/decisions/0051): the lane's own statement time is the minimum of its last few statements. */
const SERVED_SAMPLES = 4



export const makePgChatStore = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const signer = yield* ReceiptKey
  const seal = fastestSealer(signer.signingKey)
  const { assertInvariants, pgAcquireTimeoutMs, pgLanes, pgLockTimeoutMs, pgMaxQueued, pgMaxWaitMs } = yield* Settings
  const clock = yield* Effect.clock
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
  const transact = <A, E>(body: Effect.Effect<A, E>, repeatable = true, inTransaction = true): Effect.Effect<A, Exclude<E, SqlError.SqlError>> =>
    Effect.clockWith((clock) => {
      const deadline = clock.unsafeCurrentTimeMillis() + pgAcquireTimeoutMs
      const attempt = (n: number): Effect.Effect<A, E> =>
        ((inTransaction ? sql.withTransaction(body) : body) as Effect.Effect<A, E>).pipe(
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

  /**
   * One statement in its own implicit transaction — a server-side function of migration 0008 — with
   * `transact`'s retries and faults: one round trip, no BEGIN, no COMMIT (its return is its commit,
   * flushed: synchronous_commit as the server has it). In assertion mode (TOLLGATE_ASSERT) the
   * statement and `check`'s reads of the rows it wrote run in one transaction instead, so a broken
   * rule rolls the statement back.
   */
  const once = <A>(statement: Effect.Effect<A, SqlError.SqlError>, check?: (a: A) => Effect.Effect<void, SqlError.SqlError>, repeatable = true): Effect.Effect<A> =>
    assertInvariants && check !== undefined ? transact(Effect.tap(statement, check), repeatable) : transact(statement, repeatable, false)

  /** What `tollgate_reserve` answers: held, a live claim met, or the window's figures (refused or not sized). */
  interface ReserveRow {
    readonly o_outcome: "held" | "claim" | "window"
    readonly o_cap: number | null
    readonly o_spent: number | null
    readonly o_reserved: number | null
    readonly o_fingerprint: string | null
    readonly o_request_id: string | null
    readonly o_state: "in_flight" | "finished" | null
    readonly o_status: number | null
    readonly o_content_type: string | null
    readonly o_body: Uint8Array | null
    readonly o_expires_at: number | null
    /** Migration 0014: the scope that refused the hold (none: not sized), and the key's and end user's figures. */
    readonly o_scope: ScopeKind | null
    readonly o_key_cap: number | null
    readonly o_key_spent: number | null
    readonly o_key_reserved: number | null
    readonly o_eu_cap: number | null
    readonly o_eu_spent: number | null
    readonly o_eu_reserved: number | null
  }

  /** Every scope's window a refused (or unsized) reservation answered, in SCOPE_ORDER (spec/scopes.ts). */
  const scopeWindowsOf = (a: ReserveArgs, row: ReserveRow): ReadonlyArray<ScopeWindow> => {
    const n = (x: number | string | null) => Number(x ?? 0)
    return [
      { scope: "project", cap: n(row.o_cap), spent: n(row.o_spent), reserved: n(row.o_reserved) },
      ...(a.hold.keyId === undefined ? [] : [{ scope: "key" as const, cap: n(row.o_key_cap), spent: n(row.o_key_spent), reserved: n(row.o_key_reserved) }]),
      ...(a.hold.endUser === undefined ? [] : [{ scope: "end_user" as const, cap: n(row.o_eu_cap), spent: n(row.o_eu_spent), reserved: n(row.o_eu_reserved) }])
    ]
  }

  const claimOutcome = (row: ReserveRow, fingerprint: string): ClaimOutcome =>
    outcomeOf(
      {
        fingerprint: row.o_fingerprint!,
        request_id: row.o_request_id!,
        state: row.o_state!,
        status: row.o_status,
        content_type: row.o_content_type,
        body: row.o_body,
        expires_at: row.o_expires_at!
      },
      fingerprint
    )

  /**
   * A lane's callback, told at most once; one that throws is logged, so the batch's other callers are
   * still told. `tellTheRest`: after a batch's fiber ended, whoever of it was not told hears how it
   * ended (a defect) — no caller waits forever on a lane.
   */
  /** The database's words for a refused batch (the SqlError's cause), for the log. */
  const refusal = (cause: Cause.Cause<unknown>): string => {
    for (const d of Cause.defects(cause)) {
      const message = ((d as { cause?: { message?: unknown } }).cause)?.message
      if (typeof message === "string") return message
    }
    return Cause.pretty(cause).split("\n")[0] ?? "unknown"
  }

  type Told = { told?: boolean }
  const toldOnce = <A, E = never>(done: (outcome: Exit.Exit<A, E>) => void): ((outcome: Exit.Exit<A, E>) => void) => {
    const once_: ((outcome: Exit.Exit<A, E>) => void) & Told = (outcome) => {
      if (once_.told === true) return
      once_.told = true
      try {
        done(outcome)
      } catch (e) {
        runFork(Effect.logError("store: a caller's callback threw", e))
      }
    }
    return once_
  }
  const tellTheRest = (batch: ReadonlyArray<{ readonly done: (outcome: Exit.Exit<any>) => void }>, exit: Exit.Exit<unknown>, requeued: ReadonlyArray<unknown> = []) => {
    for (const p of batch) {
      if ((p.done as Told).told === true || requeued.includes(p)) continue
      p.done(Exit.isFailure(exit) ? Exit.failCause(exit.cause) : Exit.die(new Error("store: a batch ended without answering this call")))
    }
  }

  /**
   * What the database itself takes for a reservation statement of a lane (docs/decisions/0051): the
   * times of its last few statements that committed, in milliseconds from the clock's nanoseconds.
   */
  const nowMs = () => Number(clock.unsafeCurrentTimeNanos()) / 1e6
  const statementTook = (served: Array<number>, ms: number): void => {
    served.push(ms)
    if (served.length > SERVED_SAMPLES) served.shift()
  }

  /**
   * Reservations, group-committed with the settlements (below): a project's go through its lane (of
   * `pgLanes`), one statement at a time per lane; those that arrive while it is in flight go together
   * in its next turn — with the lane's settlements, `tollgate_turn` (`runTurn`), else alone,
   * `tollgate_reserve_many` (migration 0010) — one transaction, one WAL flush — each answered on its
   * own row. A batch the database refuses is split, each reservation run alone; a connection lost
   * under a batch is each of its callers' lost connection (each voids, fenced, what it may have taken).
   */
  interface PendingReserve {
    readonly a: ReserveArgs
    readonly amount: number | null
    /** When it joined its lane's queue (the clock's milliseconds): its wait is judged against `pgMaxWaitMs`. */
    readonly at: number
    readonly done: (outcome: Exit.Exit<ReserveRow, ReserveRefused>) => void
  }

  const reserveItem = (a: ReserveArgs, amount: number | null) => {
    const c = a.claim
    const r = a.request
    const h = a.hold
    return {
      now: a.now,
      epoch: a.epoch,
      fence: RESERVATION_FENCE,
      c_project: c?.scope.projectId ?? null,
      c_environment: c?.scope.environment ?? null,
      c_key: c?.key ?? null,
      c_fingerprint: c?.fingerprint ?? null,
      r_id: r.id,
      r_project: r.projectId,
      r_environment: r.environment,
      r_key_id: r.keyId,
      r_endpoint: r.endpoint,
      r_model: r.model,
      r_route: r.route,
      r_stream: r.stream ? 1 : 0,
      r_idempotency_key: r.idempotencyKey,
      r_rate_card_version: r.rateCardVersion,
      r_created_at: r.createdAt,
      h_reservation: h.reservationId,
      h_request: h.requestId,
      h_project: h.projectId,
      h_period: h.period,
      h_deadline: h.deadline,
      amount,
      // Migration 0014: the hold's other scopes (spec/scopes.ts).
      h_key: h.keyId ?? null,
      h_end_user: h.endUser ?? null
    }
  }

  /** A reservation shed by a bound: refused before anything of it was held (a typed refusal, not a defect). */
  const shedBy = (why: string): Exit.Exit<never, ReserveRefused> => Exit.fail({ _tag: "Shed", error: serverOverloaded(why) })

  /** A statement's exit, and the time the database took for it (ms): what `statementTook` keeps of a committed one. */
  const timedExit = <A>(statement: Effect.Effect<A>): Effect.Effect<readonly [Exit.Exit<A>, number]> =>
    Effect.suspend(() => {
      const sentAt = nowMs()
      return Effect.map(Effect.exit(statement), (exit) => [exit, nowMs() - sentAt] as const)
    })

  /** Whether a statement's connection was lost under it (it may have committed) or never had. */
  const connectionLost = (cause: Cause.Cause<unknown>): boolean =>
    [...Cause.defects(cause)].some((d) => d instanceof MayHaveCommitted || d instanceof StoreUnavailable)

  /** A batch whose hot row's lock was not had within the bound: each shed, nothing of it held. */
  const shedLocked = (batch: ReadonlyArray<PendingReserve>): void => {
    pgShed.lock += batch.length
    const shed = shedBy(`a budget row or idempotency key was locked by other calls for longer than ${pgLockTimeoutMs} ms`)
    for (const p of batch) p.done(shed)
  }

  /** A committed batch's reservations, each answered on its row (`o_i`, its index in the batch). */
  const answerReserves = (batch: ReadonlyArray<PendingReserve>, rows: ReadonlyArray<ReserveRow & { readonly o_i: number }>, fn: string): void => {
    pgReserveBatches.batches++
    pgReserveBatches.reservations += batch.length
    const byIndex = new Map(rows.map((row) => [row.o_i, row]))
    batch.forEach((p, i) => {
      const row = byIndex.get(i)
      p.done(row === undefined ? Exit.die(new Error(`${fn} answered nothing for reservation ${p.a.hold.reservationId}`)) : Exit.succeed(row))
    })
  }

  /**
   * One batch of reservations: `tollgate_reserve_bounded` (migration 0013 — `tollgate_reserve_many`
   * with the hot-row bound as its transaction's `lock_timeout`), one statement, one transaction.
   * A lock not had within the bound rolls the whole statement back: each of the batch is shed, 503
   * server_overloaded, nothing held — a clean refusal, before any money moved. Its answer: the
   * statement's time when it committed (the database's own for a statement), else undefined.
   */
  const runReserveBatch = (batch: ReadonlyArray<PendingReserve>): Effect.Effect<number | undefined> =>
    Effect.gen(function* () {
      const [exit, took] = yield* timedExit(
        once(
          sql<ReserveRow & { o_i: number }>`SELECT * FROM tollgate_reserve_bounded(${pgLockTimeoutMs}, ${JSON.stringify(batch.map((p) => reserveItem(p.a, p.amount)))}::jsonb)`,
          undefined,
          false
        )
      )
      if (Exit.isFailure(exit)) {
        if (lockNotHad(exit.cause)) {
          shedLocked(batch)
          return undefined
        }
        if (connectionLost(exit.cause) || batch.length === 1) {
          for (const p of batch) p.done(Exit.failCause(exit.cause))
          return undefined
        }
        pgSettleBatches.splits++
        yield* Effect.logWarning(`store: a batch of ${batch.length} reservations was refused; each runs alone: ${refusal(exit.cause)}`)
        for (const p of batch) yield* runReserveBatch([p])
        return undefined
      }
      answerReserves(batch, exit.value, "tollgate_reserve_bounded")
      return took
    })

  /**
   * What the database itself takes for a statement of the lane: the fastest of its last few that
   * committed (none yet: 0). A minimum, so one stuck statement does not raise it — only a database
   * slow statement after statement does.
   */
  const ownTime = (served: ReadonlyArray<number>): number => (served.length === 0 ? 0 : Math.min(...served))

  /**
   * The reservations of the lane's next turn (`drain`). A reservation that waited for its turn past `pgMaxWaitMs` beyond the
   * database's own time for a statement (`ownTime`) is shed here, before its statement is sent: it
   * never reaches the database, so nothing of it is held. Beyond, not past: a call that waited only
   * for the statement in flight waited for the database, not for a queue, and shedding it would
   * shed everything once the database is slower than the bound (docs/decisions/0046) — it goes, and a
   * batch a statement keeps flowing. What is shed is a standing queue: calls passed over by a full
   * batch, or queued behind a statement far slower than the lane's recent ones (a stuck row).
   */
  const takeReserves = (lane: Lane): Array<PendingReserve> => {
    const taken = lane.reserves.splice(0, SETTLE_BATCH)
    const bound = pgMaxWaitMs + ownTime(lane.served)
    const oldest = clock.unsafeCurrentTimeMillis() - bound
    const late = taken.filter((p) => p.at < oldest)
    if (late.length === 0) return taken
    pgShed.waited += late.length
    const shed = shedBy(`its reservation waited for the database past ${Math.round(bound)} ms (a statement's own time plus the ${pgMaxWaitMs} ms bound)`)
    for (const p of late) p.done(shed)
    return taken.filter((p) => p.at >= oldest)
  }

  /**
   * One attempt of a reservation, in its lane's next batch — or shed at once when `pgMaxQueued`
   * reservations wait on the lane already: refused before it waits, nothing sent.
   */
  const reserveAttempt = (a: ReserveArgs, amount: number | null): Effect.Effect<ReserveRow, ReserveRefused> =>
    Effect.async<ReserveRow, ReserveRefused>((resume) => {
      const lane = laneOf(a.hold.projectId)
      if (lane.reserves.length >= pgMaxQueued) {
        pgShed.queued++
        return resume(shedBy(`${lane.reserves.length} reservations wait for the database already`))
      }
      lane.reserves.push({ a, amount, at: clock.unsafeCurrentTimeMillis(), done: toldOnce((outcome) => resume(outcome)) })
      if (!lane.busy) wake(lane)
    }).pipe(Effect.uninterruptible)

  /**
   * The reservation, in one round trip when the window has room: the hold is sized as if the window
   * were unbounded — which, when the guard then accepts it (spent + reserved + amount ≤ cap on the
   * locked row), is exactly what sizing on the window's figures gives (`decideChainCap` caps each
   * route at its limit once the remaining budget covers the worst case at that limit). When the guard
   * refuses, the function answers the window's figures in the same round trip and the call is sized on
   * them and tried once more — the only reservations with a second round trip: those near the cap.
   *
   * Every reservation commits synchronously, unlike SQLite's unsynced non-streamed one
   * (chatTransactions.ts, `mustSync`): there the only crash that loses it also ends its call; here the
   * database can crash while the gateway lives on, calls the upstream and then finds no hold to charge.
   */
  const reserve = (a: ReserveArgs): Effect.Effect<Reserved, ReserveRefused> =>
    Effect.gen(function* () {
      const fingerprint = a.claim?.fingerprint ?? ""
      const unbounded = sizeReservation(a.sizing, Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER)
      const first = yield* reserveAttempt(a, unbounded._tag === "Fits" ? unbounded.reservation : null)
      if (first.o_outcome === "claim") return yield* Effect.fail<ReserveRefused>({ _tag: "ClaimLost", outcome: claimOutcome(first, fingerprint) })
      if (first.o_outcome === "held" && unbounded._tag === "Fits") return { outputCap: unbounded.outputCap, reservation: unbounded.reservation }
      // Sized on every scope's figures (the smallest room; a refusal names the first scope without room).
      const sized = sizeInScopes(a.sizing, scopeWindowsOf(a, first))
      if (sized._tag === "OverBudget") return yield* Effect.fail<ReserveRefused>(sized)
      const second = yield* reserveAttempt(a, sized.reservation)
      if (second.o_outcome === "claim") return yield* Effect.fail<ReserveRefused>({ _tag: "ClaimLost", outcome: claimOutcome(second, fingerprint) })
      if (second.o_outcome !== "held") {
        const scope = second.o_scope ?? "project"
        return yield* Effect.fail<ReserveRefused>({ _tag: "OverBudget", message: holdRefusedMessage(sized.reservation, a.hold.period, scope), param: scope })
      }
      return { outputCap: sized.outputCap, reservation: sized.reservation }
    }).pipe(
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

  /**
   * Settlements, group-committed (issue 40, item 2; docs/decisions/0043). Each project belongs to one
   * of `pgLanes` lanes of this instance (TOLLGATE_PG_LANES), and a lane runs one `tollgate_settle` call at a time:
   * idle, a settlement goes once the event loop's pass has run (`wake`: with whatever else arrived in it); busy, the settlements
   * that arrive meanwhile — of every project of the lane — wait and go together as the next batch, up
   * to `SETTLE_BATCH`: one statement, one transaction, one WAL flush for all of them, each project's
   * receipts chained in order inside it. A caller is told its settlement ended only when the statement
   * that carried it returned (committed); nothing answers on a batch still in flight.
   *
   * The receipts are signed here, before the statement, so the statement must know the hash each
   * extends: the head this instance last saw of each project (one lane per project, so an instance's
   * own batches never race for a head). The function checks those heads on the locked rows: when
   * another instance moved one, nothing is written, the heads it found come back and the batch goes
   * back to the front of the lane's queue, sealed again on them in the lane's next turn with whatever
   * queued meanwhile (0058: once; a batch that comes back a second time is sealed again at once, a
   * statement of its own); a head that keeps moving is locked first (`settleLocked`). A batch is all
   * or nothing: a hold not as the batch knew it (resolved, or not the hold named) is answered alone
   * and the rest go again; a batch the database refuses for another reason is split, each of its
   * settlements run alone, so one call's failure never fails its neighbours' money.
   */
  type Head = { readonly seq: number; readonly hash: string }
  const heads = new Map<string, Head>()
  interface Pending {
    readonly s: SettleArgs
    readonly done: (outcome: Exit.Exit<void>) => void
    /** Put back once in its lane's queue after a head it was sealed on had moved (`runBatch`): the next time it goes on by rounds. */
    requeued?: boolean
  }
  interface Lane {
    /** Settlements waiting for the lane's next turn. */
    queue: Array<Pending>
    /** Reservations waiting for it. */
    reserves: Array<PendingReserve>
    busy: boolean
    /** Its last few committed reservation statements' times (ms): see `ownTime`. */
    readonly served: Array<number>
  }
  const lanes: ReadonlyArray<Lane> = Array.from({ length: pgLanes }, () => ({ queue: [], reserves: [], busy: false, served: [] }))
  const laneOf = (projectId: string): Lane => lanes[laneIndex(projectId, pgLanes)]!
  const runtime = yield* Effect.runtime<never>()
  const runFork = Runtime.runFork(runtime)

  /** An unknown head: the function finds it different from any, and answers the real one. */
  const UNKNOWN_HEAD: Head = { seq: -1, hash: "" }
  /** The head this instance last saw of a project's chain (what a batch is sealed on), or the unknown one. */
  const knownHead = (projectId: string): Head => heads.get(projectId) ?? UNKNOWN_HEAD

  /** Projects whose head another instance moved, until when (ms) they count as contended. */
  const contendedUntil = new Map<string, number>()
  const movedBySomeoneElse = (projectIds: Iterable<string>): void => {
    const until = clock.unsafeCurrentTimeMillis() + CONTENDED_MS
    for (const projectId of projectIds) contendedUntil.set(projectId, until)
  }
  /**
   * Whether a lane's batch takes the chain's writer lock before it is sealed (0056): big enough that
   * the lock's extra round trips cost less than sealing and sending it again, and one of its projects
   * contended. A small batch (a lightly loaded lane) keeps the one-statement turn.
   */
  const lockedFirst = (batch: ReadonlyArray<Pending>): boolean => {
    if (batch.length < LOCKED_FIRST_BATCH || contendedUntil.size === 0) return false
    const now = clock.unsafeCurrentTimeMillis()
    for (const [projectId, until] of contendedUntil) if (until <= now) contendedUntil.delete(projectId)
    return batch.some((p) => contendedUntil.has(p.s.hold.projectId))
  }

  /**
   * The chain's writer lock of each project of `batch` (migration 0026), in the transaction under way,
   * and the heads read under it: no other settlement can move them until the transaction ends.
   */
  const lockChains = (batch: ReadonlyArray<Pending>) =>
    Effect.map(
      sql<{ h: Record<string, Head> }>`SELECT tollgate_lock_chains(${JSON.stringify(batch.map(({ s }) => ({ project_id: s.hold.projectId })))}::jsonb) AS h`,
      ([row]) => (projectId: string): Head => row!.h[projectId] ?? UNKNOWN_HEAD
    )

  /**
   * The locked path (docs/decisions/0056): in one transaction — BEGIN, the chains' writer locks and the
   * heads read under them (`lockChains`), `statement` on the batch sealed on those heads, COMMIT — so
   * the batch is signed once and cannot find a head moved. Counted in `pgSettleBatches.locked`.
   */
  const underChainLocks = <A>(batch: ReadonlyArray<Pending>, statement: (sealed: ReturnType<typeof sealBatch>) => Effect.Effect<A, SqlError.SqlError>, repeatable = true) =>
    Effect.suspend(() => {
      pgSettleBatches.locked++
      return transact(Effect.flatMap(lockChains(batch), (headOf) => statement(sealBatch(batch, headOf))), repeatable)
    })

  /** `tollgate_turn`'s rows: the reservations' (`o_i` ≥ 0), then the one carrying the settlements' answer (`o_i` = -1). */
  type TurnRow = ReserveRow & { readonly o_i: number; readonly o_settle: SettleAnswer | null }

  type SettleAnswer =
    | { readonly ok: true; readonly heads: Record<string, Head> }
    | { readonly ok?: undefined; readonly heads: ReadonlyArray<Head & { readonly project_id: string }> }
    | { readonly ok?: undefined; readonly items: ReadonlyArray<{ readonly i: number; readonly outcome: "done" | "gone" | "mismatch" | "again" }> }

  /** The settlements sealed in order, each project's on its head (`headOf`), as `tollgate_settle`'s batch. */
  const sealBatch = (batch: ReadonlyArray<Pending>, headOf: (projectId: string) => Head) => {
    const expected = new Map<string, Head>()
    const links = new Map<string, Head>()
    const items = batch.map(({ s }) => {
      const projectId = s.hold.projectId
      let link = links.get(projectId)
      if (link === undefined) {
        link = headOf(projectId)
        expected.set(projectId, link)
      }
      const charge = Math.min(s.charge, s.hold.amount)
      const seq = link.seq + 1
      const unsigned = unsignedReceipt(s, { project_id: projectId, period: s.hold.period, amount: s.hold.amount, charge }, { seq, prevHash: link.hash, now: s.now, keyId: signer.keyId })
      const { receipt, body } = seal(unsigned)
      links.set(projectId, { seq, hash: receipt.hash })
      const idem = s.idempotent
      return {
        reservation_id: s.hold.reservationId,
        request_id: s.hold.requestId,
        project_id: projectId,
        period: s.hold.period,
        amount: s.hold.amount,
        charge,
        now: s.now,
        route: s.route,
        receipt_id: s.receiptId,
        verification: JSON.stringify(s.verification),
        attempts: JSON.stringify(s.attempts),
        idem:
          idem === undefined
            ? null
            : {
                project_id: idem.scope.projectId,
                environment: idem.scope.environment,
                key: idem.key,
                status: idem.result.status,
                content_type: idem.result.contentType,
                body: asBuffer(idem.result.body).toString("base64"),
                expires_at: s.now + idem.ttlMs
              },
        receipt: {
          id: receipt.receipt_id,
          environment: receipt.environment,
          seq,
          rate_card_version: receipt.rate_card_version,
          body,
          prev_hash: receipt.prev_hash,
          hash: receipt.hash,
          signature: receipt.signature,
          signing_key_id: receipt.signing_key_id,
          input_tokens: s.tokens.input,
          cached_input_tokens: s.tokens.cached_input,
          output_tokens: s.tokens.output,
          reasoning_tokens: s.tokens.reasoning
        }
      }
    })
    return { heads: [...expected].map(([project_id, h]) => ({ project_id, seq: h.seq, hash: h.hash })), items }
  }

  /** Assertion mode: the windows a committed batch wrote, checked inside its transaction. */
  const assertBatch = (batch: ReturnType<typeof sealBatch>) =>
    Effect.forEach(
      new Map(batch.items.map((i) => [`${i.project_id}\u0000${i.period}`, i])).values(),
      (i) => assertWindow(i.project_id, i.period, `settling ${i.reservation_id}`),
      { discard: true }
    )

  const settleStatement = (batch: ReturnType<typeof sealBatch>) =>
    once(
      Effect.map(sql<{ r: SettleAnswer }>`SELECT tollgate_settle(${JSON.stringify(batch)}::jsonb) AS r`, (rows) => rows[0]!.r),
      (answer) => (answer.ok === true ? assertBatch(batch) : Effect.void)
    )

  /**
   * The locked path, for a batch whose heads other instances keep moving: in one transaction, the
   * chains' writer locks taken first and the heads read under them (`lockChains`), the batch sealed on
   * them, then `tollgate_settle` — which then cannot find a head moved. Four round trips (BEGIN, the
   * locks, the settlement, COMMIT); the holds and the budget windows are locked by the settlement
   * alone, so the project's reservations do not wait for the sealing.
   */
  const settleLocked = (live: ReadonlyArray<Pending>) =>
    underChainLocks(live, (sealed) =>
      Effect.flatMap(sql<{ r: SettleAnswer }>`SELECT tollgate_settle(${JSON.stringify(sealed)}::jsonb) AS r`, ([answer]) =>
        Effect.as(answer!.r.ok === true ? assertBatch(sealed) : Effect.void, answer!.r)
      )
    )

  /** A head moved between the function's read and its lock (SQLSTATE TG001): everything rolled back. */
  const headMoved = (cause: Cause.Cause<unknown>): boolean =>
    [...Cause.defects(cause)].some((d) => (d as { _tag?: unknown })._tag === "SqlError" && ((d as SqlError.SqlError).cause as { code?: unknown } | undefined)?.code === "TG001")

  /** Settlements put back at the front of their lane's queue, in order, once each (`runBatch`). */
  const requeue = (lane: Lane, batch: ReadonlyArray<Pending>): void => {
    pgSettleBatches.requeued += batch.length
    for (const p of batch) p.requeued = true
    lane.queue.unshift(...batch)
  }

  /**
   * Settle `batch` (in order); each caller told once how its settlement ended. `answered`: the
   * database's answer to the batch already sent (sealed on this instance's heads) in a lane's turn
   * (`runTurn`), taken as the first round's; `contended`: its heads are known to be moving.
   */
  const runBatch = (lane: Lane, batch: ReadonlyArray<Pending>, contendedAtFirst = false, answered?: SettleAnswer): Effect.Effect<void> =>
    Effect.gen(function* () {
      let live = batch
      let contended = contendedAtFirst
      let given = answered
      for (let round = 0; live.length > 0; round++) {
        if (round >= HEAD_ROUNDS) {
          const exit = Exit.die(new Error(`settlement: a chain head moved ${HEAD_ROUNDS} times in a row`))
          for (const p of live) p.done(exit)
          return
        }
        const exit: Exit.Exit<SettleAnswer> =
          given !== undefined
            ? Exit.succeed(given)
            : yield* Effect.exit(contended ? settleLocked(live) : settleStatement(sealBatch(live, knownHead)))
        given = undefined
        if (Exit.isFailure(exit)) {
          for (const p of live) heads.delete(p.s.hold.projectId)
          if (headMoved(exit.cause)) {
            pgSettleBatches.headMoved++
            movedBySomeoneElse(live.map((p) => p.s.hold.projectId))
            contended = true
            continue
          }
          if (live.length === 1) return live[0]!.done(Exit.failCause(exit.cause))
          // One call's failure must not fail its neighbours: each settles alone.
          pgSettleBatches.splits++
          yield* Effect.logWarning(`store: a batch of ${live.length} settlements was refused; each runs alone: ${refusal(exit.cause)}`)
          for (const p of live) yield* runBatch(lane, [p])
          return
        }
        const answer: SettleAnswer = exit.value
        if (answer.ok === true) {
          pgSettleBatches.batches++
          pgSettleBatches.settlements += live.length
          for (const [projectId, head] of Object.entries(answer.heads)) heads.set(projectId, head)
          for (const p of live) p.done(Exit.void)
          return
        }
        if ("heads" in answer) {
          pgSettleBatches.headMoved++
          // A head this instance knew and another moved (not one it had yet to learn, after a start).
          movedBySomeoneElse(answer.heads.filter((h) => heads.has(h.project_id)).map((h) => h.project_id))
          for (const h of answer.heads) heads.set(h.project_id, { seq: h.seq, hash: h.hash })
          // The first time: back to the front of the lane's queue, sealed again in its next turn — with
          // the reservations and settlements that queued meanwhile, one statement for all of them, where
          // sending them again at once was a statement of their own (docs/decisions/0058). The lane's
          // next turn starts as soon as this one ends (`drain`); nothing answers them before it commits.
          if (round === 0 && live.every((p) => p.requeued !== true)) {
            requeue(lane, live)
            return
          }
          // Known and moved again: another instance appends to this chain too; take its lock first.
          if (round > 0) contended = true
          continue
        }
        // Some holds are not as this batch knew them: nothing was written; those answered, the rest again.
        const found = new Map(answer.items.map((f) => [f.i, f.outcome]))
        for (const [i, outcome] of found) {
          const p = live[i]!
          if (outcome === "again") {
            // The same hold twice in one batch (its settlement sent again while the first was queued):
            // the later one waits for the next batch, which finds the first's outcome.
            lane.queue.push(p)
            continue
          }
          p.done(
            outcome === "done"
              ? Exit.void // its own earlier attempt committed before its connection was lost
              : outcome === "gone"
                ? Exit.die(new Error(`reservation ${p.s.hold.reservationId} was already resolved`))
                : Exit.die(new Error(`reservation ${p.s.hold.reservationId} is not the hold its settlement names (amount, project, period or charge)`))
          )
        }
        live = live.filter((_, i) => !found.has(i))
      }
    })

  /**
   * A lane's turn (migration 0025, docs/decisions/0054): its settlements and its reservations in ONE
   * statement, `tollgate_turn` — one commit, one WAL flush, one turn of each window row — the
   * settlements first (never shed), the reservations after them under the hot-row bound, in a block of
   * their own: a lock not had within it sheds the reservations alone and the settlements commit. The
   * settlements' answer goes on as `runBatch`'s first round (a head moved, a hold not as known: as
   * ever). A turn the database refused whole is each part's own statement again, as if sent apart; a
   * connection lost under it is each reservation's lost connection (each voids, fenced, what it may
   * have taken) and the settlements go again (each recognizes its own commit). Its answer, as
   * `runReserveBatch`'s: the turn's statement time when its reservations committed, else undefined —
   * the statement alone, not the settlement rounds that may follow it.
   *
   * `locked` (docs/decisions/0056): the settlements' projects are contended, so the turn takes their
   * chains' writer locks first and seals on the heads read under them, in one transaction — BEGIN, the
   * locks, the turn, COMMIT — instead of sealing on heads another instance has most likely moved.
   */
  const runTurn = (lane: Lane, settles: ReadonlyArray<Pending>, reserves: ReadonlyArray<PendingReserve>, locked = false): Effect.Effect<number | undefined> =>
    Effect.gen(function* () {
      const carrying = (rows: ReadonlyArray<TurnRow>) => rows.find((r) => r.o_i === -1)
      const turn = (sealed: ReturnType<typeof sealBatch>) =>
        sql<TurnRow>`SELECT * FROM tollgate_turn(${pgLockTimeoutMs}, ${JSON.stringify(sealed)}::jsonb, ${JSON.stringify(reserves.map((p) => reserveItem(p.a, p.amount)))}::jsonb)`
      const checked = (sealed: ReturnType<typeof sealBatch>) => (rows: ReadonlyArray<TurnRow>) =>
        carrying(rows)?.o_settle?.ok === true ? assertBatch(sealed) : Effect.void
      const [exit, took] = yield* timedExit(
        locked
          ? underChainLocks(settles, (sealed) => Effect.tap(turn(sealed), checked(sealed)), false)
          : Effect.suspend(() => {
              const sealed = sealBatch(settles, knownHead)
              return once(turn(sealed), checked(sealed), false)
            })
      )
      if (Exit.isFailure(exit)) {
        for (const p of settles) heads.delete(p.s.hold.projectId)
        const moved = headMoved(exit.cause)
        if (moved) {
          pgSettleBatches.headMoved++
          movedBySomeoneElse(settles.map((p) => p.s.hold.projectId))
        }
        const lost = connectionLost(exit.cause)
        if (lost) for (const p of reserves) p.done(Exit.failCause(exit.cause))
        yield* runBatch(lane, settles, moved)
        return lost ? undefined : yield* runReserveBatch(reserves)
      }
      pgTurns.turns++
      const carried = carrying(exit.value)
      // The carrying row's outcome is 'shed' when the bound stopped the reservations (not a ReserveRow's).
      const shed = (carried?.o_outcome as string | undefined) === "shed"
      if (shed) shedLocked(reserves)
      else answerReserves(reserves, exit.value, "tollgate_turn")
      if (carried?.o_settle == null) {
        const died = Exit.die(new Error("tollgate_turn answered nothing for its settlements"))
        for (const p of settles) p.done(died)
      } else {
        yield* runBatch(lane, settles, false, carried.o_settle)
      }
      return shed ? undefined : took
    })

  /**
   * The lane's next turn: the settlements queued (up to `SETTLE_BATCH`) and the reservations queued
   * and not late (`takeReserves`), in one statement when there are both (`runTurn`), else the one
   * part's own. Idle, a call goes once the event loop's pass has run (`wake`); busy, what arrives
   * meanwhile waits for the next turn.
   */
  const drain = (lane: Lane): void => {
    lane.busy = true
    const settles = lane.queue.splice(0, SETTLE_BATCH)
    const reserves = takeReserves(lane)
    if (settles.length === 0 && reserves.length === 0) {
      if (lane.queue.length > 0 || lane.reserves.length > 0) return drain(lane)
      lane.busy = false
      return
    }
    const locked = lockedFirst(settles)
    const turn =
      reserves.length === 0
        ? Effect.as(runBatch(lane, settles, locked), undefined)
        : settles.length === 0
          ? runReserveBatch(reserves)
          : runTurn(lane, settles, reserves, locked)
    runFork(turn).addObserver((exit) => {
      if (Exit.isSuccess(exit) && exit.value !== undefined) statementTook(lane.served, exit.value)
      tellTheRest(settles, exit, lane.queue)
      tellTheRest(reserves, exit)
      if (lane.queue.length > 0 || lane.reserves.length > 0) return drain(lane)
      lane.busy = false
    })
  }

  /**
   * An idle lane's next turn, once what runs now has run: the calls that arrive in the same pass of
   * the event loop — every caller one committed turn resumed, the requests parsed from one read of the
   * sockets — go together instead of the first alone and the rest one statement later. No timer: the
   * turn waits for nothing but the work already under way (`setImmediate`, after the pass's I/O).
   */
  const wake = (lane: Lane): void => {
    lane.busy = true
    setImmediate(() => drain(lane))
  }

  /** The settlement by callback: queued on its project's lane, `done` told once how it ended (committed). */
  const settleThen = (s: SettleArgs, done: (outcome: Exit.Exit<void>) => void): void => {
    const lane = laneOf(s.hold.projectId)
    lane.queue.push({ s, done: toldOnce(done) })
    if (!lane.busy) wake(lane)
  }

  const settle = (s: SettleArgs): Effect.Effect<void> =>
    Effect.async<void>((resume) => settleThen(s, (outcome) => resume(outcome))).pipe(Effect.uninterruptible)

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

  /** One `tollgate_abandon` (migration 0008): one round trip. */
  const abandonOnce = (a: AbandonArgs & { readonly fenced?: true }): Effect.Effect<void> =>
    Effect.flatMap(
      once(
        Effect.map(
          sql<{ outcome: "fenced" | "none" | "voided" }>`SELECT tollgate_abandon(${a.now}, ${a.reservationId}, ${a.requestId}, ${a.code}, ${a.message},
            ${JSON.stringify(a.attempts)}, ${a.idempotent?.scope.projectId ?? null}, ${a.idempotent?.scope.environment ?? null}, ${a.idempotent?.key ?? null},
            ${a.fenced === true ? RESERVATION_FENCE : null}) AS outcome`,
          (rows) => rows[0]!.outcome
        ),
        (outcome) =>
          outcome !== "voided"
            ? Effect.void
            : Effect.flatMap(
                sql<{ project_id: string; period: string }>`SELECT project_id, period FROM reservations WHERE id = ${a.reservationId}`,
                ([r]) => (r === undefined ? Effect.void : assertWindow(r.project_id, r.period, `abandoning ${a.reservationId}`))
              )
      ),
      (outcome) => (outcome === "fenced" ? Effect.die(storeUnavailable("a lost reservation is still committing")) : Effect.void)
    )

  /** Open streams' holds and claims kept past their deadline: one statement, the holds locked in id order. */
  const extend = (a: ExtendArgs): Effect.Effect<void> =>
    a.streams.length === 0
      ? Effect.void
      : Effect.asVoid(
          once(sql`WITH s AS (
              SELECT x->>'reservation_id' AS rid, x->>'request_id' AS req, x->>'project_id' AS pid, x->>'environment' AS env, x->>'key' AS k
              FROM jsonb_array_elements(${JSON.stringify(
                a.streams.map((s) => ({
                  reservation_id: s.reservationId,
                  request_id: s.requestId,
                  project_id: s.idempotent?.scope.projectId ?? null,
                  environment: s.idempotent?.scope.environment ?? null,
                  key: s.idempotent?.key ?? null
                }))
              )}::jsonb) AS x),
            locked AS (SELECT r.id FROM reservations r WHERE r.id IN (SELECT rid FROM s) AND r.state = 'held' ORDER BY r.id FOR UPDATE),
            holds AS (UPDATE reservations r SET deadline = ${a.deadline} FROM locked WHERE r.id = locked.id RETURNING 1),
            claims AS (UPDATE idempotency i SET expires_at = ${a.deadline} FROM s
              WHERE s.k IS NOT NULL AND i.project_id = s.pid AND i.environment = s.env AND i.key = s.k AND i.request_id = s.req AND i.state = 'in_flight'
              RETURNING 1)
            SELECT (SELECT COUNT(*) FROM holds) AS holds, (SELECT COUNT(*) FROM claims) AS claims`)
        )

  /**
   * This epoch is alive (its `instances` row), and each open stream's progress mark (src/store/epochs.ts),
   * written on its hold while it is still held: what a survivor charges if this process dies.
   */
  const heartbeat = (a: HeartbeatArgs): Effect.Effect<void> =>
    Effect.asVoid(
      once(sql`WITH m AS (
          SELECT x->>'reservation_id' AS rid, x->>'mark' AS mark FROM jsonb_array_elements(${JSON.stringify(
            a.marks.map((m) => ({ reservation_id: m.reservationId, mark: JSON.stringify(m.mark) }))
          )}::jsonb) AS x),
        beat AS (UPDATE instances SET heartbeat_at = ${a.now} WHERE epoch = ${a.epoch} RETURNING 1),
        locked AS (SELECT r.id FROM reservations r WHERE r.id IN (SELECT rid FROM m) AND r.state = 'held' ORDER BY r.id FOR UPDATE),
        marked AS (UPDATE reservations r SET progress = m.mark FROM m, locked WHERE r.id = m.rid AND r.id = locked.id RETURNING 1)
        SELECT (SELECT COUNT(*) FROM beat) AS beat, (SELECT COUNT(*) FROM marked) AS marked`)
    )

  /** One batch of the sweep: the expired holds no other sweeper holds, each voided once. */
  const expireBatch = (a: ExpireArgs): Effect.Effect<number> =>
    transact(
      Effect.gen(function* () {
        const voided = yield* sql<{ request_id: string; amount: number; project_id: string; period: string; key_id: string | null; end_user: string | null }>`
          UPDATE reservations SET state = 'voided', charge = 0, resolved_at = ${a.now}
          WHERE state = 'held' AND id IN (
            SELECT id FROM reservations WHERE state = 'held' AND deadline <= ${a.now}
            ORDER BY id LIMIT ${SWEEP_BATCH} FOR UPDATE SKIP LOCKED)
          RETURNING request_id, amount, project_id, period, key_id, end_user`
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
        // Then the holds' key and end-user windows (migration 0014), each behind its project's row locked above.
        const scoped = new Map<string, { scope: string; period: string; amount: number }>()
        const release = (scope: string, period: string, amount: number) => {
          const k = `${scope}\u0000${period}`
          const w = scoped.get(k) ?? { scope, period, amount: 0 }
          w.amount += amount
          scoped.set(k, w)
        }
        for (const v of voided) {
          if (v.key_id !== null) release(keyAccount(v.key_id), v.period, v.amount)
          if (v.end_user !== null) release(endUserAccount(v.project_id, v.end_user), v.period, v.amount)
        }
        for (const w of [...scoped.values()].sort((x, y) => (x.scope + x.period < y.scope + y.period ? -1 : 1))) {
          yield* sql`UPDATE scope_windows SET reserved = reserved - ${w.amount} WHERE scope = ${w.scope} AND period = ${w.period}`
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
    settleThen,
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
