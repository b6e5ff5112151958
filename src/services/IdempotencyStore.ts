/**
 * Idempotency records (DESIGN.md §5), scoped to (project, environment, key).
 *
 * The claim is one INSERT on the primary key (ON CONFLICT DO NOTHING): two racing requests can never
 * both win. A finished record replays its exact status and bytes; a different fingerprint is a
 * conflict; a record in flight makes the duplicate wait (bounded) and then replay. A failure that
 * charged nothing deletes the claim so a retry runs again. Records live at least 24 h.
 */
import { SqlClient } from "@effect/sql"
import type BetterSqlite3 from "better-sqlite3"
import { Clock, Duration, Effect, Either } from "effect"
import { createHash } from "node:crypto"
import { canonicalJson } from "../../spec/canonicalJson.ts"
import { isValidKey } from "../../spec/idempotency.ts"
import { IdempotencyConflict, InvalidRequest } from "../domain/errors.ts"
import { Sqlite } from "../store/Database.ts"

export interface Scope {
  readonly projectId: string
  readonly environment: string
}

export interface StoredResult {
  readonly status: number
  readonly contentType: string
  readonly body: Uint8Array
  readonly requestId: string
}

export type ClaimOutcome =
  | { readonly _tag: "Claimed" }
  | { readonly _tag: "Replay"; readonly result: StoredResult }
  | { readonly _tag: "Conflict" }
  | { readonly _tag: "InFlight"; readonly requestId: string }

interface Row {
  readonly fingerprint: string
  readonly request_id: string
  readonly state: "in_flight" | "finished"
  readonly status: number | null
  readonly content_type: string | null
  readonly body: Uint8Array | null
  readonly expires_at: number
}

/**
 * When a duplicate's wait for its in-flight original runs out, it is told to come back this much
 * later (409 with Retry-After and x-should-retry: true): the original is alive (its process keeps
 * its claim alive; a dead process's claims are freed at its restart or once its heartbeat is stale).
 */
export const IN_FLIGHT_RETRY_AFTER_MS = 1_000

/** The rule lives in spec/idempotency.ts: 1–255 printable ASCII characters. */
export const validIdempotencyKey = isValidKey

export const fingerprintOf = (method: string, path: string, body: unknown): string =>
  createHash("sha256").update(`${method}\n${path}\n${canonicalJson(body)}`, "utf8").digest("hex")

export const checkKey = (key: string, param: string): Either.Either<string, InvalidRequest> =>
  validIdempotencyKey(key)
    ? Either.right(key)
    : Either.left(new InvalidRequest({ message: "The idempotency key must be 1–255 printable ASCII characters.", param }))

const outcomeOf = (row: Row, fingerprint: string): ClaimOutcome => {
  if (row.fingerprint !== fingerprint) return { _tag: "Conflict" }
  if (row.state === "in_flight") return { _tag: "InFlight", requestId: row.request_id }
  return {
    _tag: "Replay",
    result: { status: row.status ?? 200, contentType: row.content_type ?? "application/json", body: row.body ?? new Uint8Array(), requestId: row.request_id }
  }
}

/** The idempotency records' statements over one better-sqlite3 connection, synchronous, inside its transactions. */
export const makeIdempotencyWrites = (db: BetterSqlite3.Database) => {
  // Prepared once on the connection the writes run on (the main thread's or the store worker's).
  const selectLive = db.prepare<[string, string, string, number], Row>(
    `SELECT fingerprint, request_id, state, status, content_type, body, expires_at FROM idempotency
     WHERE project_id = ? AND environment = ? AND key = ? AND expires_at > ?`
  )
  const insertClaim = db.prepare<[string, string, string, string, string, number, number]>(
    `INSERT INTO idempotency (project_id, environment, key, fingerprint, request_id, state, created_at, expires_at)
     VALUES (?, ?, ?, ?, ?, 'in_flight', ?, ?) ON CONFLICT DO NOTHING`
  )
  const deleteExpired = db.prepare<[string, string, string, number]>(
    "DELETE FROM idempotency WHERE project_id = ? AND environment = ? AND key = ? AND expires_at <= ?"
  )
  const updateFinished = db.prepare<[number, string, Uint8Array, number, string, string, string, string, number]>(
    `UPDATE idempotency SET state = 'finished', status = ?, content_type = ?, body = ?, expires_at = ?
     WHERE project_id = ? AND environment = ? AND key = ? AND request_id = ? AND state = 'in_flight' AND expires_at > ?`
  )
  const deleteClaim = db.prepare<[string, string, string, string]>(
    "DELETE FROM idempotency WHERE project_id = ? AND environment = ? AND key = ? AND request_id = ? AND state = 'in_flight'"
  )
  const updateExpiry = db.prepare<[number, string, string, string, string]>(
    "UPDATE idempotency SET expires_at = ? WHERE project_id = ? AND environment = ? AND key = ? AND request_id = ? AND state = 'in_flight'"
  )

  const find = (scope: Scope, key: string, now: number): Row | undefined => selectLive.get(scope.projectId, scope.environment, key, now)

  /** Read-only look at `now`: what a claim would meet. Fast path before routing and pricing. */
  const peekAt = (scope: Scope, key: string, fingerprint: string, now: number): ClaimOutcome => {
    const row = find(scope, key, now)
    return row === undefined ? { _tag: "Claimed" } : outcomeOf(row, fingerprint)
  }

  /**
   * The atomic claim, synchronous: call it inside a transaction (`Sqlite.transact`), where the
   * INSERT and the rare expired-record DELETE cannot interleave with any other claim.
   */
  const claimSync = (scope: Scope, key: string, fingerprint: string, requestId: string, claimExpiresAt: number, now: number): ClaimOutcome => {
    const args = [scope.projectId, scope.environment, key, fingerprint, requestId, now, claimExpiresAt] as const
    if (insertClaim.run(...args).changes === 1) return { _tag: "Claimed" }
    // Taken: by a live record, or by an expired one that may be replaced (the rare path).
    if (deleteExpired.run(scope.projectId, scope.environment, key, now).changes > 0 && insertClaim.run(...args).changes === 1) {
      return { _tag: "Claimed" }
    }
    return outcomeOf(find(scope, key, now)!, fingerprint)
  }

  /**
   * Store the final response so replays return it byte for byte. Part of the settlement transaction.
   * Only the owner's live in-flight claim: a finished result is final, an expired claim is gone.
   */
  const finishSync = (scope: Scope, key: string, requestId: string, result: Omit<StoredResult, "requestId">, ttlMs: number, now: number): void => {
    const body = Buffer.isBuffer(result.body) ? result.body : Buffer.from(result.body.buffer, result.body.byteOffset, result.body.byteLength)
    updateFinished.run(result.status, result.contentType, body, now + ttlMs, scope.projectId, scope.environment, key, requestId, now)
  }

  /** A failure that charged nothing frees the key, so a retry runs again. */
  const releaseSync = (scope: Scope, key: string, requestId: string): void => {
    deleteClaim.run(scope.projectId, scope.environment, key, requestId)
  }

  /** Keep an in-flight claim alive as long as its hold. */
  const extendClaimSync = (scope: Scope, key: string, requestId: string, expiresAt: number): void => {
    updateExpiry.run(expiresAt, scope.projectId, scope.environment, key, requestId)
  }

  return { peekAt, claimSync, finishSync, releaseSync, extendClaimSync } as const
}

export class IdempotencyStore extends Effect.Service<IdempotencyStore>()("tollgate/IdempotencyStore", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const { db, transact } = yield* Sqlite

    const { peekAt, claimSync, finishSync, releaseSync, extendClaimSync } = makeIdempotencyWrites(db)

    const peek = (scope: Scope, key: string, fingerprint: string): Effect.Effect<ClaimOutcome> =>
      Effect.map(Clock.currentTimeMillis, (now) => peekAt(scope, key, fingerprint, now))

    /** The atomic claim in a transaction of its own (or of the caller's open one). */
    const claim = (scope: Scope, key: string, fingerprint: string, requestId: string, claimExpiresAt: number): Effect.Effect<ClaimOutcome> =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => transact(() => claimSync(scope, key, fingerprint, requestId, claimExpiresAt, now)))

    const finish = (scope: Scope, key: string, requestId: string, result: Omit<StoredResult, "requestId">, ttlMs: number) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => transact(() => finishSync(scope, key, requestId, result, ttlMs, now)))

    /** Keep an in-flight claim alive as long as its hold (see Ledger.extendHold). */
    const extendClaim = (scope: Scope, key: string, requestId: string, expiresAt: number) =>
      transact(() => extendClaimSync(scope, key, requestId, expiresAt))

    const release = (scope: Scope, key: string, requestId: string) => transact(() => releaseSync(scope, key, requestId))

    /** Release every in-flight claim of the given requests (recovery sweep). */
    const releaseRequests = (requestIds: ReadonlyArray<string>) =>
      requestIds.length === 0
        ? Effect.void
        : sql`DELETE FROM idempotency WHERE state = 'in_flight' AND ${sql.in("request_id", requestIds)}`.pipe(Effect.orDie, Effect.asVoid)

    /**
     * Wait for an in-flight original to finish or be released. Polls the store (so it works across
     * instances) with a backoff from 5 ms to 100 ms, up to `maxWaitMs`.
     */
    const awaitSettled = (scope: Scope, key: string, fingerprint: string, maxWaitMs: number): Effect.Effect<ClaimOutcome, IdempotencyConflict> =>
      Effect.gen(function* () {
        const start = yield* Clock.currentTimeMillis
        let delay = 5
        for (;;) {
          const outcome = yield* peek(scope, key, fingerprint)
          if (outcome._tag !== "InFlight") return outcome
          const now = yield* Clock.currentTimeMillis
          if (now - start >= maxWaitMs) {
            return yield* new IdempotencyConflict({
              message: `A request with this idempotency key (${outcome.requestId}) is still in progress; retry after ${Math.ceil(IN_FLIGHT_RETRY_AFTER_MS / 1000)} s to receive its result.`,
              retryAfterMs: IN_FLIGHT_RETRY_AFTER_MS
            })
          }
          yield* Effect.sleep(Duration.millis(delay))
          delay = Math.min(100, delay * 2)
        }
      })

    return { peek, peekAt, claim, claimSync, finish, finishSync, release, releaseSync, releaseRequests, extendClaim, awaitSettled } as const
  })
}) {}
