/**
 * Settlement of a governed call: the charge, receipt, request completion and idempotent result in
 * ONE transaction; or, when nothing was charged, the hold voided and the key freed in one. And the
 * non-streamed call's upstream leg, which ends in one of the two.
 */
import { Cause, Chunk, Clock, Effect, Exit, Option } from "effect"
import { chargedTokens, settlementCharge, type TokenCounts } from "../../../spec/pricing.ts"
import { upstreamBody } from "../../domain/chat.ts"
import { crashPoint } from "../../domain/crashPoint.ts"
import { type GovernanceError, StoreUnavailable } from "../../domain/errors.ts"
import { newReceiptId } from "../../domain/ids.ts"
import { timeline } from "../../domain/timeline.ts"
import type { Abortable, UpstreamReply } from "../../providers/Provider.ts"
import type { Attempt, Verification } from "../Requests.ts"
import type { Route, RouteFailed, Served } from "../Router.ts"
import { deliveredText, type Governance } from "../surfaces/Surface.ts"
import { countText } from "../Tokenizer.ts"
import type { SettleArgs } from "../../store/ChatStore.ts"
import { childSpan, endSpan, type InFlight, LifecycleViolation } from "./inflight.ts"
import type { GatewayContext, GatewayReply } from "./types.ts"


/**
 * Bodies bound for the store worker are encoded into their own exact-size buffers: a small Buffer
 * from node's pool is a view on a shared 8 KiB ArrayBuffer, and posting it to the worker clones
 * the whole 8 KiB.
 */
const utf8 = new TextEncoder()

const CHECKS = ["route", "schema", "budget"] as const

/** The checks a completed call reports, and which of them failed. */
export const verificationOf = (passed: Record<(typeof CHECKS)[number], boolean>): Verification => {
  const failed = CHECKS.filter((c) => !passed[c])
  return { state: failed.length === 0 ? "verified" : "unverified", checks: [...CHECKS], failed_checks: failed }
}

/**
 * A completed call's governance evidence at `now`: its checks, its charge, the rate card it was
 * priced on, and the id of the receipt its settlement writes.
 */
export const completedGovernance = (
  requestId: string,
  passed: Record<(typeof CHECKS)[number], boolean>,
  charge: number,
  rateCardVersion: string,
  now: number
): Governance => ({
  request_id: requestId,
  status: "completed",
  verification: verificationOf(passed),
  credits_charged: charge,
  rate_card_version: rateCardVersion,
  receipt_id: newReceiptId(now)
})

/** What a settlement charges for, and how its reply renders once the governance is known. */
export interface Charged {
  readonly served: { readonly route: Route; readonly attempts: ReadonlyArray<Attempt> }
  readonly tokens: TokenCounts
  readonly usageSource: "reported" | "counted"
  readonly schemaOk: boolean
  readonly render: (g: Governance, now: number) => { readonly status: number; readonly contentType: string; readonly body: Uint8Array | string }
}

export const makeSettlement = (ctx: GatewayContext) => {
  const { settings, span, store, router, metrics, fork } = ctx

  /** Void the hold, fail the request and free the idempotency key: nothing was charged. */
  const abandon = (f: InFlight, code: string, message: string, attempts: ReadonlyArray<Attempt>) =>
    Effect.suspend(() => {
      f.to("voided")
      const p = f.plan
      return Effect.flatMap(Clock.currentTimeMillis, (now) =>
        store.abandon({
          now,
          reservationId: p.hold.reservationId,
          requestId: p.requestId,
          code,
          message,
          attempts,
          idempotent: p.idempotency === undefined ? undefined : { scope: p.scope, key: p.idempotency.key }
        })
      ).pipe(span("tollgate.abandon", { attributes: { "tollgate.request_id": p.requestId, "tollgate.code": code } }))
    }).pipe(Effect.uninterruptible)

  /**
   * What one settlement writes, at `now`: the charge, the receipt's id, the rendered reply (encoded
   * once: the same bytes are stored for replay and sent) and the transaction's arguments. Pure but for
   * its assertion: the charge is within the hold (`settlementCharge` clamps it so; a charge past it is a
   * bug, and never reaches the store).
   */
  const settlementAt = (f: InFlight, charged: Charged, now: number) => {
    const p = f.plan
    const principal = f.call.principal
    const { served, tokens, usageSource, schemaOk, render } = charged
    const { prices, version } = p.prices.get(served.route.name)!
    const { charge, withinReservation } = settlementCharge(tokens, prices, p.hold.amount)
    if (!(Number.isSafeInteger(charge) && charge >= 0 && charge <= p.hold.amount)) {
      throw new LifecycleViolation(`a charge of ${charge} against a hold of ${p.hold.amount} (request ${p.requestId})`)
    }
    const governance = completedGovernance(p.requestId, { route: true, schema: schemaOk, budget: withinReservation }, charge, version, now)
    const rendered = render(governance, now)
    const stored = { status: rendered.status, contentType: rendered.contentType, body: typeof rendered.body === "string" ? utf8.encode(rendered.body) : rendered.body }
    timeline.mark("settle: charge, render, encode")
    const args: SettleArgs = {
      now,
      hold: p.hold,
      receiptId: governance.receipt_id,
      organization: principal.organization,
      environment: principal.environment,
      model: p.request.model,
      route: served.route.name,
      rateCardVersion: version,
      tokens,
      usageSource,
      charge,
      verification: governance.verification,
      attempts: served.attempts,
      idempotent: p.idempotency === undefined ? undefined : { scope: p.scope, key: p.idempotency.key, ttlMs: settings.idempotencyTtlMs, result: stored }
    }
    return { charge, stored, args }
  }

  /**
   * A settlement that failed (the store refused or dropped its connection past the bound, a defect):
   * void the hold and free the key, so the call is answered with nothing held and its retry runs. A
   * no-op in the store where the settlement did commit after all (its connection lost at COMMIT): the
   * retry replays it.
   */
  const unsettled = (f: InFlight, cause: Cause.Cause<unknown>, attempts: ReadonlyArray<Attempt>) => {
    const unavailable = Chunk.some(Cause.defects(cause), (d) => d instanceof StoreUnavailable)
    return abandon(
      f,
      unavailable ? "store_unavailable" : "internal_error",
      unavailable ? "The gateway's database could not record the settlement; nothing was charged." : "The gateway failed while recording the settlement; nothing was charged.",
      attempts
    ).pipe(Effect.catchAllCause(() => Effect.void))
  }

  /** What a settlement stored: the reply as written for replay, and as sent. */
  type Stored = { readonly status: number; readonly contentType: string; readonly body: Uint8Array }

  /**
   * Charge, receipt, request completion and idempotent result in one transaction, by the store's
   * callback, with no fiber (docs/decisions/0036): `done` is told the stored reply once the commit is
   * durable, or — its hold voided first (`unsettled`) — how it failed. Called from callbacks (the
   * store's message loop, undici's): a throw of ours before the post is the caller's to answer; after
   * the commit, it is `done`'s defect.
   */
  const settle = (f: InFlight, charged: Charged, now: number, done: (written: Exit.Exit<Stored>) => void): void => {
    f.to("settling")
    const { charge, stored, args } = settlementAt(f, charged, now)
    // The upstream limits corrected to the real count, and the call's slots back (src/services/UpstreamLimits.ts).
    f.call.limitsTaken?.end(charged.tokens.input + charged.tokens.output, now)
    const traced = childSpan(f, "tollgate.settle", () => ({ "tollgate.request_id": f.plan.requestId, "tollgate.credits_charged": charge, "tollgate.usage_source": charged.usageSource }))
    store.settleThen(args, (written) => {
      endSpan(f, traced, written)
      if (Exit.isFailure(written)) {
        return fork(f, Effect.zipRight(unsettled(f, written.cause, charged.served.attempts), Effect.failCause(written.cause)), done)
      }
      let answer: Exit.Exit<Stored>
      try {
        f.to("settled")
        timeline.mark("settle: resume the call")
        crashPoint("settled")
        metrics.settled(f.call.principal.projectId, charged.usageSource, charge)
        answer = Exit.succeed(stored)
      } catch (e) {
        answer = Exit.die(e)
      }
      done(answer)
    })
  }

  /**
   * Shutdown interrupted a call that holds a reservation: void it, then end as interrupted — unless it
   * is a stream already delivering, which settles its own hold, charged for what it delivered.
   */
  const abandonInterrupted = <E>(f: InFlight, cause: Cause.Cause<E>): Effect.Effect<never, E> =>
    f.delivering ? Effect.failCause(cause) : Effect.zipRight(abandon(f, "interrupted", "The gateway shut down before the upstream answered.", []), Effect.failCause(cause))

  const fromRouteFailure = (f: InFlight, failed: RouteFailed) =>
    Effect.zipRight(
      abandon(f, failed.error._tag === "InvalidRequest" ? "invalid_request_error" : "route_unavailable", failed.error.message, failed.attempts),
      Effect.fail(failed.error)
    )

  /**
   * The upstream leg of a non-streamed call and its settlement, held by callbacks rather than a fiber
   * (docs/decisions/0033): the call is answered once its settlement is written, or its hold voided.
   * While the upstream answers, nothing of the call but its InFlight and the request's callbacks is
   * alive, so the calls in flight cost the young generation a fraction of what suspended fibers did
   * (0032). Shutdown stops it through `f.stop` (the upstream aborted: the hold voided). A client that
   * hangs up stops nothing: the call is settled all the same.
   */
  const startLeg = (f: InFlight): void => new Leg(f).begin()

  /**
   * One non-streamed call's leg: its state one object, since it lives through the upstream's wait and
   * every scavenge meanwhile copies what it holds (docs/decisions/0034).
   */
  class Leg implements Abortable {
    private upstream: Abortable | undefined = undefined
    /** Traced, the upstream's span is opened here and ended by the answer (no fiber spans the wait). */
    private traceSpan: ReturnType<typeof childSpan> = undefined

    constructor(private readonly f: InFlight) {}

    begin(): void {
      const f = this.f
      const p = f.plan
      f.to("upstream")
      f.stop = () => this.abort()
      this.traceSpan = childSpan(f, "tollgate.upstream", () => ({ "tollgate.request_id": p.requestId }), "client")
      this.upstream = router.start(f.runtime, f.clock, p.chain, () => upstreamBody(p.body, p.request, p.outputCap), (exit) => this.answered(exit))
    }

    abort(): void {
      this.upstream?.abort()
    }

    private answered(exit: Exit.Exit<Served<UpstreamReply>, RouteFailed>): void {
      const f = this.f
      endSpan(f, this.traceSpan, exit)
      timeline.mark("upstream: router bookkeeping, back in the call")
      // Called from undici's callbacks: a throw of ours while building the next step (a reply it
      // cannot read, a bug) is that step's defect, answered as one, never an exception in undici's
      // handler that would leave the call in flight for ever.
      try {
        if (Exit.isSuccess(exit)) {
          return settle(f, servedSettlement(f, exit.value), f.clock.unsafeCurrentTimeMillis(), (written) =>
            f.answer(Exit.isSuccess(written) ? Exit.succeed<GatewayReply>({ _tag: "Body", ...written.value }) : Exit.failCause(written.cause))
          )
        }
        fork(f, upstreamFailed(f, exit.cause), (end) => f.answer(end))
      } catch (defect) {
        // Nothing was posted: the hold is voided (a no-op where the lifecycle already voided it).
        fork(f, Effect.zipRight(f.holds ? abandon(f, "internal_error", "The gateway failed while settling; nothing was charged.", []) : Effect.void, Effect.die(defect)), (end) => f.answer(end))
      }
    }
  }

  /** A leg that ended without an answer: nothing was charged, so the hold is voided, with the reason. */
  const upstreamFailed = (f: InFlight, cause: Cause.Cause<RouteFailed>): Effect.Effect<never, GovernanceError> => {
    if (Cause.isInterruptedOnly(cause)) return abandonInterrupted(f, cause as Cause.Cause<never>)
    const failed = Cause.failureOption(cause)
    if (Cause.isDie(cause)) {
      return Effect.zipRight(
        abandon(f, "internal_error", "The gateway failed while calling the upstream; nothing was charged.", []),
        Option.isSome(failed) ? Effect.fail(failed.value.error) : Effect.failCause(cause as Cause.Cause<never>)
      )
    }
    return Option.isSome(failed) ? fromRouteFailure(f, failed.value) : Effect.failCause(cause as Cause.Cause<never>)
  }

  /** What a served completion is charged for (reported usage, or counted), and how its reply renders. */
  const servedSettlement = (f: InFlight, served: Served<UpstreamReply>): Charged => {
    const p = f.plan
    const json = served.value.json
    const choices = json.choices
    const schemaOk = Array.isArray(choices) && choices.length > 0 && choices.every((c) => c !== null && typeof c === "object" && "message" in c)
    const { tokens, source } = chargedTokens(json.usage, p.inputTokens, () =>
      Array.isArray(choices) ? choices.reduce((n: number, c: { message?: unknown }) => n + countText(deliveredText(c?.message)), 0) : 0
    )
    const render = (g: Governance, now: number) => ({ status: 200, contentType: "application/json", body: p.surface.renderBody(served.value.raw, json, g, tokens, now) })
    return { served, tokens, usageSource: source, schemaOk, render }
  }

  return { abandon, abandonInterrupted, settle, unsettled, fromRouteFailure, startLeg } as const
}

export type Settlement = ReturnType<typeof makeSettlement>
