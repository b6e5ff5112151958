/**
 * Recovery (docs/contract.md §4), so a crash never strands budget or an idempotency key:
 *
 * - Dead epochs, at once: every process marks its holds and claims with its epoch (src/services/Instance.ts).
 *   On start (before the server listens), and then with every sweep, the holds of the epochs known
 *   dead are resolved through the store port: a stream that had delivered tokens is settled from its
 *   last durable progress mark (same pricing rule, a signed receipt, its idempotency key answering
 *   with that result); anything else is abandoned — voided, its request failed, its key freed, so a
 *   retry runs again (spec/pricing.ts `orphanCharge`). Which epochs are known dead is spec/epochs.ts
 *   `isDeadEpoch`: several instances sharing one store (each with its own TOLLGATE_INSTANCE_ID) never
 *   resolve each other's live calls, and a dead one's are resolved by any survivor.
 * - Past the deadline: a hold whose deadline passed belongs to a process that died or hung (or was
 *   made before epochs existed). At start-up and then every interval, void such holds, fail their
 *   requests and free their idempotency claims. Each hold moves at most once (guarded UPDATE).
 */
import { Clock, Duration, Effect, Schedule } from "effect"
import { isDeadEpoch, staleAfterMs } from "../../spec/epochs.ts"
import { orphanCharge, type Prices } from "../../spec/pricing.ts"
import { Settings } from "../domain/config.ts"
import { ChatStore } from "../store/ChatStore.ts"
import { makeEpochStore } from "../store/epochStore.ts"
import type { OrphanHold, ProgressMark } from "../store/epochs.ts"
import { completedGovernance } from "./Gateway.ts"
import { Instance } from "./Instance.ts"
import { chatCompletionsSurface } from "./surfaces/chatCompletions.ts"
import { type Governance, sseEvent } from "./surfaces/Surface.ts"

/** What the request row of a hold voided by the sweep says. */
export const EXPIRED_FAILURE = {
  code: "reservation_expired",
  message: "The gateway did not finish this request before its reservation deadline; nothing was charged."
} as const

/** What the request row of a call in flight of a dead epoch, voided at restart, says. */
export const INTERRUPTED_FAILURE = {
  code: "interrupted",
  message: "The gateway restarted before this request finished; nothing was charged. Retry it (with the same idempotency key, if any)."
} as const

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
    const store = yield* ChatStore
    const settings = yield* Settings
    const instance = yield* Instance
    const epochs = yield* makeEpochStore
    const staleMs = staleAfterMs(settings.heartbeatMs)

    /** Void every expired hold (one transaction of the store port); returns how many were voided. */
    const sweep = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const voided = yield* store.expire({ now, failure: EXPIRED_FAILURE })
      if (voided > 0) yield* Effect.logWarning(`recovery sweep voided ${voided} expired reservation(s)`)
      return voided
    })

    /**
     * Resolve one hold of a dead epoch through the store port: settled from its progress mark when its
     * stream delivered output, abandoned otherwise (both guarded: a hold resolved meanwhile is left).
     */
    const resolveOrphan = (h: OrphanHold, now: number): Effect.Effect<"charged" | "voided"> =>
      Effect.flatMap(
        (() => {
          const version = parseMark(h.progress)?.rateCardVersion
          return version === undefined ? Effect.succeed(undefined) : epochs.pricesOf(version)
        })(),
        (card) => resolveOrphanWith(h, now, card)
      )

    const resolveOrphanWith = (h: OrphanHold, now: number, card: Record<string, unknown> | undefined): Effect.Effect<"charged" | "voided"> => {
      const scope = { projectId: h.project_id, environment: h.environment }
      const mark = parseMark(h.progress)
      const prices = mark === undefined ? undefined : (card?.[mark.route] as Prices | undefined)
      const decided = orphanCharge(mark?.tokens, prices, h.amount)
      if (mark !== undefined && decided._tag === "Charge") {
        const charge = decided.charge
        const governance = completedGovernance(h.request_id, { route: true, schema: false, budget: decided.withinReservation }, charge, mark.rateCardVersion, now)
        const { verification, receipt_id: receiptId } = governance
        const message = `The gateway restarted while this stream was open; the ${mark.tokens.output + mark.tokens.reasoning} output tokens delivered before were charged.`
        return Effect.as(
          store.settle({
            now,
            hold: {
              reservationId: h.id,
              requestId: h.request_id,
              projectId: h.project_id,
              period: h.period,
              amount: h.amount,
              deadline: h.deadline,
              // The hold's scopes, as stored: the receipt names them (issue 41).
              ...(h.key_id === null ? {} : { keyId: h.key_id }),
              ...(h.end_user === null ? {} : { endUser: h.end_user })
            },
            receiptId,
            organization: h.organization,
            environment: h.environment,
            model: h.model,
            route: mark.route,
            rateCardVersion: mark.rateCardVersion,
            tokens: mark.tokens,
            usageSource: "counted",
            charge,
            verification,
            attempts: [],
            idempotent:
              h.idempotency_key === null
                ? undefined
                : {
                    scope,
                    key: h.idempotency_key,
                    ttlMs: settings.idempotencyTtlMs,
                    result: { status: 200, contentType: "text/event-stream", body: interruptedStreamBody(h.endpoint, message, governance, now) }
                  }
          }),
          "charged" as const
        )
      }
      return Effect.as(
        store.abandon({
          now,
          reservationId: h.id,
          requestId: h.request_id,
          ...INTERRUPTED_FAILURE,
          attempts: [],
          idempotent: h.idempotency_key === null ? undefined : { scope, key: h.idempotency_key }
        }),
        "voided" as const
      )
    }

    /** Resolve the holds and claims of every epoch known dead; returns how many holds were charged and voided. */
    const resolveDeadEpochs = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const dead = (yield* epochs.epochsHolding()).filter((e) => isDeadEpoch(e, instance, now, staleMs))
      let charged = 0
      let voided = 0
      for (const e of dead) {
        for (const h of yield* epochs.heldOf(e.epoch)) {
          const outcome = yield* resolveOrphan(h, now).pipe(
            // Another instance resolved it first (a settlement finds it no longer held): leave it.
            Effect.catchAllDefect((d) => Effect.as(Effect.logWarning(`recovery: hold ${h.id} not resolved here`, d), "gone" as const))
          )
          if (outcome === "charged") charged++
          else if (outcome === "voided") voided++
        }
        yield* epochs.dropClaims(e.epoch)
      }
      if (charged + voided > 0) {
        yield* Effect.logWarning(
          `recovery: resolved ${charged + voided} call(s) in flight of dead epoch(s) ${dead.map((e) => e.epoch).join(", ")} in ${(yield* Clock.currentTimeMillis) - now} ms: ${charged} stream(s) charged from their progress mark, ${voided} voided`
        )
      }
      return { charged, voided }
    })

    yield* resolveDeadEpochs
    yield* sweep
    // An epoch whose heartbeat stops is found dead within `staleMs` plus one interval.
    const interval = Duration.millis(Math.min(30_000, staleMs))
    yield* Effect.forkScoped(Effect.repeat(Effect.delay(Effect.zipRight(resolveDeadEpochs, sweep), interval), Schedule.forever))
    return { sweep, resolveDeadEpochs } as const
  })
}) {}
