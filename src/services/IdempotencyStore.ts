/**
 * Idempotency (docs/contract.md, "Idempotency"), scoped to (project, environment, key): the key's
 * rules, the fingerprint, and the reads — `peek`, and `awaitSettled` for a duplicate that meets a
 * call in flight. The writes (claim in the reservation, finish in the settlement, release in the
 * abandonment and the recovery sweep) are the store port's transactions (src/store/ChatStore.ts over
 * src/store/idempotencyStatements.ts): a finished record replays its exact status and bytes; a
 * different fingerprint is a conflict; a failure that charged nothing frees the key.
 */
import { Clock, Duration, Effect, Either } from "effect"
import { canonicalJson } from "../../spec/canonicalJson.ts"
import { sha256Hex } from "../../spec/receipt.ts"
import { isValidKey } from "../../spec/idempotency.ts"
import { IdempotencyConflict, InvalidRequest } from "../domain/errors.ts"
import { IdempotencyRepo } from "../store/idempotencyRepo.ts"
import type { ClaimOutcome, Scope } from "../store/idempotencyStatements.ts"

export type { ClaimOutcome, Scope, StoredResult } from "../store/idempotencyStatements.ts"

/**
 * When a duplicate's wait for its in-flight original runs out, it is told to come back this much
 * later (409 with Retry-After and x-should-retry: true): the original is alive (its process keeps
 * its claim alive; a dead process's claims are freed at its restart or once its heartbeat is stale).
 */
export const IN_FLIGHT_RETRY_AFTER_MS = 1_000

/** The rule lives in spec/idempotency.ts: 1–255 printable ASCII characters. */
export const validIdempotencyKey = isValidKey

export const fingerprintOf = (method: string, path: string, body: unknown): string =>
  sha256Hex(`${method}\n${path}\n${canonicalJson(body)}`)

export const checkKey = (key: string, param: string): Either.Either<string, InvalidRequest> =>
  validIdempotencyKey(key)
    ? Either.right(key)
    : Either.left(new InvalidRequest({ message: "The idempotency key must be 1–255 printable ASCII characters.", param }))

export class IdempotencyStore extends Effect.Service<IdempotencyStore>()("tollgate/IdempotencyStore", {
  effect: Effect.gen(function* () {
    /** Read-only look at `now`: what a claim would meet (src/store/idempotencyRepo.ts: synchronous on SQLite's connection). */
    const { peekAt } = yield* IdempotencyRepo

    const peek = (scope: Scope, key: string, fingerprint: string): Effect.Effect<ClaimOutcome> =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => peekAt(scope, key, fingerprint, now))

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

    return { peek, peekAt, awaitSettled } as const
  }),
  dependencies: [IdempotencyRepo.Default]
}) {}
