/**
 * Recovery (DESIGN.md §4), so a crash never strands budget or an idempotency key:
 *
 * - Dead epochs, at once: every process marks its holds and claims with its epoch (src/services/Instance.ts).
 *   On start, and then with every sweep, the holds of the epochs known dead are resolved: a stream
 *   that had delivered tokens is charged from its last durable progress mark (same pricing rule,
 *   a signed receipt, its idempotency key answering with that result); anything else is voided, its
 *   request failed and its key freed, so a retry runs again.
 *   An epoch is known dead when it is an earlier epoch of this instance id (this process holds that
 *   identity now), when it stopped cleanly, or when its heartbeat is older than `staleAfterMs`.
 *   Several instances sharing one store (each with its own TOLLGATE_INSTANCE_ID) thus never resolve
 *   each other's live calls, and a dead one's are resolved within `staleAfterMs` by any survivor.
 * - Past the deadline: a hold whose deadline passed belongs to a process that died or hung (or was
 *   made before epochs existed). Every interval, void such holds, fail their requests and free their
 *   idempotency claims.
 *
 * Each hold moves at most once (guarded UPDATE, and a state check in the same transaction).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Schedule } from "effect"
import { chargeWithinReservation, type Prices, settledCharge } from "../../spec/pricing.ts"
import { Settings } from "../domain/config.ts"
import { newReceiptId } from "../domain/ids.ts"
import { Sqlite } from "../store/Database.ts"
import { makeEpochReads, type OrphanHold, type ProgressMark } from "../store/epochs.ts"
import { verificationOf } from "./Gateway.ts"
import { IdempotencyStore } from "./IdempotencyStore.ts"
import { Instance } from "./Instance.ts"
import { Ledger } from "./Ledger.ts"
import { Requests } from "./Requests.ts"
import { chatCompletionsSurface } from "./surfaces/chatCompletions.ts"
import { type Governance, sseEvent } from "./surfaces/Surface.ts"

/** An epoch with a heartbeat older than this is dead: ten beats missed, and never under 10 s. */
export const staleAfterMs = (heartbeatMs: number): number => Math.max(10_000, 10 * heartbeatMs)

export interface EpochRow {
  readonly epoch: number
  readonly instance_id: string
  readonly heartbeat_at: number
  readonly stopped_at: number | null
}

/** Whether `other` is known dead to the process `me` at `now` (see the module comment). */
export const isDeadEpoch = (other: EpochRow, me: { readonly epoch: number; readonly instanceId: string }, now: number, staleMs: number): boolean =>
  other.epoch !== me.epoch &&
  ((other.instance_id === me.instanceId && other.epoch < me.epoch) || other.stopped_at !== null || other.heartbeat_at < now - staleMs)

const parseMark = (progress: string | null): ProgressMark | undefined => {
  if (progress === null) return undefined
  try {
    return JSON.parse(progress) as ProgressMark
  } catch {
    return undefined
  }
}

/** What a retry of a stream cut by the crash replays: the stream's end, with the charge's evidence. */
const interruptedStreamBody = (endpoint: string, message: string, governance: Governance, nowMs: number): Uint8Array => {
  const frames =
    endpoint === "/v1/responses"
      ? [sseEvent("error", JSON.stringify({ type: "error", sequence_number: 0, code: "route_unavailable", message, param: null, governance }))]
      : chatCompletionsSurface.streamRenderer({ includeUsage: false, requestId: governance.request_id, nowMs }).broken(message, governance)
  return Buffer.concat(frames.map((f) => Buffer.from(f.buffer, f.byteOffset, f.byteLength)))
}

export class Recovery extends Effect.Service<Recovery>()("tollgate/Recovery", {
  scoped: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const ledger = yield* Ledger
    const requests = yield* Requests
    const idempotency = yield* IdempotencyStore
    const settings = yield* Settings
    const instance = yield* Instance
    const { db, transact } = yield* Sqlite
    const epochs = makeEpochReads(db)
    const staleMs = staleAfterMs(settings.heartbeatMs)

    /**
     * Resolve one hold of a dead epoch, in one transaction: charged from its progress mark when its
     * stream delivered output, voided otherwise. Returns what happened ("gone": resolved meanwhile).
     */
    const resolveOrphan = (h: OrphanHold, now: number) =>
      transact((): "charged" | "voided" | "gone" => {
        if (!epochs.isHeldSync(h.id)) return "gone"
        const scope = { projectId: h.project_id, environment: h.environment }
        const mark = parseMark(h.progress)
        const prices = mark === undefined ? undefined : (epochs.pricesOfSync(mark.rateCardVersion)?.[mark.route] as Prices | undefined)
        if (mark !== undefined && prices !== undefined && mark.tokens.output + mark.tokens.reasoning > 0) {
          const charge = settledCharge(mark.tokens, prices, h.amount)
          const verification = verificationOf({ route: true, schema: false, budget: chargeWithinReservation(mark.tokens, prices, h.amount) })
          const receiptId = newReceiptId(now)
          const receipt = ledger.settleSync(
            {
              hold: { reservationId: h.id, requestId: h.request_id, projectId: h.project_id, period: h.period, amount: h.amount, deadline: h.deadline },
              receiptId,
              organization: h.organization,
              environment: h.environment,
              model: h.model,
              route: mark.route,
              rateCardVersion: mark.rateCardVersion,
              tokens: mark.tokens,
              usageSource: "counted",
              charge,
              verification
            },
            now
          )
          requests.completeSync(h.request_id, { route: mark.route, creditsCharged: receipt.credits_charged, receiptId, verification, attempts: [], completedAt: now })
          if (h.idempotency_key !== null) {
            const governance: Governance = {
              request_id: h.request_id,
              status: "completed",
              verification,
              credits_charged: receipt.credits_charged,
              rate_card_version: mark.rateCardVersion,
              receipt_id: receiptId
            }
            const message = `The gateway restarted while this stream was open; the ${mark.tokens.output + mark.tokens.reasoning} output tokens delivered before were charged.`
            const body = interruptedStreamBody(h.endpoint, message, governance, now)
            idempotency.finishSync(scope, h.idempotency_key, h.request_id, { status: 200, contentType: "text/event-stream", body }, settings.idempotencyTtlMs, now)
          }
          return "charged"
        }
        if (!ledger.releaseSync(h.id, now)) return "gone"
        requests.failSync(h.request_id, {
          code: "interrupted",
          message: "The gateway restarted before this request finished; nothing was charged. Retry it (with the same idempotency key, if any).",
          attempts: [],
          completedAt: now
        })
        if (h.idempotency_key !== null) idempotency.releaseSync(scope, h.idempotency_key, h.request_id)
        return "voided"
      })

    /** Resolve the holds and claims of every epoch known dead; returns how many holds were charged and voided. */
    const resolveDeadEpochs = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const dead = epochs.epochsHoldingSync().filter((e) => isDeadEpoch(e, instance, now, staleMs))
      let charged = 0
      let voided = 0
      for (const e of dead) {
        for (const h of epochs.heldOfSync(e.epoch)) {
          const outcome = yield* resolveOrphan(h, now)
          if (outcome === "charged") charged++
          else if (outcome === "voided") voided++
        }
        yield* transact(() => epochs.dropClaimsSync(e.epoch))
      }
      if (charged + voided > 0) {
        yield* Effect.logWarning(
          `recovery: resolved ${charged + voided} call(s) in flight of dead epoch(s) ${dead.map((e) => e.epoch).join(", ")} in ${(yield* Clock.currentTimeMillis) - now} ms: ${charged} stream(s) charged from their progress mark, ${voided} voided`
        )
      }
      return { charged, voided }
    })

    /** Void every expired hold; returns how many were voided. */
    const sweep = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const expired = yield* ledger.expiredHolds(now)
      let voided = 0
      for (const hold of expired) {
        const moved = yield* sql.withTransaction(
          Effect.gen(function* () {
            const released = yield* ledger.release(hold.id)
            if (!released) return false
            yield* requests.fail(hold.request_id, {
              code: "reservation_expired",
              message: "The gateway did not finish this request before its reservation deadline; nothing was charged.",
              attempts: [],
              completedAt: now
            })
            yield* idempotency.releaseRequests([hold.request_id])
            return true
          })
        ).pipe(Effect.orDie)
        if (moved) voided++
      }
      if (voided > 0) yield* Effect.logWarning(`recovery sweep voided ${voided} expired reservation(s)`)
      return voided
    })

    yield* resolveDeadEpochs
    yield* sweep
    // An epoch whose heartbeat stops is found dead within `staleMs` plus one interval.
    const interval = Duration.millis(Math.min(30_000, staleMs))
    yield* Effect.forkScoped(Effect.repeat(Effect.delay(Effect.zipRight(resolveDeadEpochs, sweep), interval), Schedule.forever))
    return { sweep, resolveDeadEpochs } as const
  })
}) {}
