/**
 * Settlement of a governed call: the charge, receipt, request completion and idempotent result in
 * ONE transaction; or, when nothing was charged, the hold voided and the key freed in one. And the
 * non-streamed call's upstream leg, which ends in one of the two.
 */
import { Cause, Chunk, Clock, Effect, Exit, Option, Runtime, type Tracer } from "effect"
import { chargedTokens, chargeWithinReservation, settledCharge, type TokenCounts } from "../../../spec/pricing.ts"
import { upstreamBody } from "../../domain/chat.ts"
import { crashPoint } from "../../domain/crashPoint.ts"
import { type GovernanceError, StoreUnavailable } from "../../domain/errors.ts"
import { newReceiptId } from "../../domain/ids.ts"
import { timeline } from "../../domain/timeline.ts"
import type { Principal } from "../KeyRegistry.ts"
import type { Abortable, UpstreamReply } from "../../providers/Provider.ts"
import type { Attempt, Verification } from "../Requests.ts"
import type { Route, RouteFailed, Served } from "../Router.ts"
import { deliveredText, type Governance } from "../surfaces/Surface.ts"
import { countText } from "../Tokenizer.ts"
import type { SettleArgs } from "../../store/ChatStore.ts"
import type { GatewayContext, GatewayReply, Plan } from "./types.ts"


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
  const { settings, span, traced, store, router, metrics, liveCalls, legs, delivering } = ctx
  /**
   * The store's settlement by callback, where it has one (the store worker's) and no span must cover
   * the settlement: a served non-streamed call then settles with no fiber (docs/decisions/0036).
   */
  const settleThen = traced ? undefined : store.settleThen

  /** Void the hold, fail the request and free the idempotency key: nothing was charged. */
  const abandon = (p: Plan, code: string, message: string, attempts: ReadonlyArray<Attempt>) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) =>
      store.abandon({
        now,
        reservationId: p.hold.reservationId,
        requestId: p.requestId,
        code,
        message,
        attempts,
        idempotent: p.idempotency === undefined ? undefined : { scope: p.scope, key: p.idempotency.key }
      })
    ).pipe(span("tollgate.abandon", { attributes: { "tollgate.request_id": p.requestId, "tollgate.code": code } }), Effect.uninterruptible)

  /**
   * What one settlement writes, at `now`: the charge, the receipt's id, the rendered reply (encoded
   * once: the same bytes are stored for replay and sent) and the transaction's arguments. Pure; the
   * one place both ways of settling (`settle`, an effect; `Leg`, by callback) take it from.
   */
  const settlementAt = (p: Plan, principal: Principal, charged: Charged, now: number) => {
    const { served, tokens, usageSource, schemaOk, render } = charged
    const { prices, version } = p.prices.get(served.route.name)!
    const charge = settledCharge(tokens, prices, p.hold.amount)
    const governance = completedGovernance(p.requestId, { route: true, schema: schemaOk, budget: chargeWithinReservation(tokens, prices, p.hold.amount) }, charge, version, now)
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

  /** What follows a settlement's commit, either way it was written. */
  const settled = (principal: Principal, usageSource: "reported" | "counted", charge: number): void => {
    timeline.mark("settle: resume the call")
    crashPoint("settled")
    metrics.settled(principal.projectId, usageSource, charge)
  }

  /** Charge, receipt, request completion and idempotent result, in one transaction; `then` maps what was stored to the caller's reply. */
  const settle = <A>(
    p: Plan,
    principal: Principal,
    charged: Charged,
    then: (stored: Stored) => A
  ): Effect.Effect<A> =>
    Effect.clockWith((clock) => {
      const { charge, stored, args } = settlementAt(p, principal, charged, clock.unsafeCurrentTimeMillis())
      return store.settle(args).pipe(
        span("tollgate.settle", { attributes: { "tollgate.request_id": p.requestId, "tollgate.credits_charged": charge, "tollgate.usage_source": charged.usageSource } }),
        Effect.tapErrorCause((cause) => unsettled(p, cause, charged.served.attempts)),
        Effect.map(() => {
          settled(principal, charged.usageSource, charge)
          return then(stored)
        })
      )
    }).pipe(Effect.uninterruptible)

  /**
   * A settlement that failed (the store refused or dropped its connection past the bound, a defect):
   * void the hold and free the key, so the call is answered with nothing held and its retry runs. A
   * no-op where the settlement did commit after all (its connection lost at COMMIT): the retry replays it.
   */
  const unsettled = (p: Plan, cause: Cause.Cause<unknown>, attempts: ReadonlyArray<Attempt>) => {
    const unavailable = Chunk.some(Cause.defects(cause), (d) => d instanceof StoreUnavailable)
    return abandon(
      p,
      unavailable ? "store_unavailable" : "internal_error",
      unavailable ? "The gateway's database could not record the settlement; nothing was charged." : "The gateway failed while recording the settlement; nothing was charged.",
      attempts
    ).pipe(Effect.catchAllCause(() => Effect.void))
  }

  /** What a settlement stored: the reply as written for replay, and as sent. */
  type Stored = { readonly status: number; readonly contentType: string; readonly body: Uint8Array }

  /**
   * `settle` by the store's callback (`settleThen`), with no fiber: the same transaction, `done` told
   * once the stored reply — after the commit is durable — or the defect (docs/decisions/0036, 0038).
   * Undefined where the store's settlement is an effect, or a span must cover it. Called from the
   * store's message loop: a throw of ours after the commit is answered as `done`'s defect.
   */
  const settleNow =
    settleThen === undefined
      ? undefined
      : (p: Plan, principal: Principal, charged: Charged, now: number, done: (written: Exit.Exit<Stored>) => void): void => {
          const { charge, stored, args } = settlementAt(p, principal, charged, now)
          settleThen(args, (written) => {
            if (Exit.isFailure(written)) return done(Exit.failCause(written.cause))
            let answer: Exit.Exit<Stored>
            try {
              settled(principal, charged.usageSource, charge)
              answer = Exit.succeed(stored)
            } catch (e) {
              answer = Exit.die(e)
            }
            done(answer)
          })
        }

  /**
   * Shutdown interrupted a call that holds a reservation: void it (a no-op if it was already resolved),
   * then end as interrupted — unless it is a stream already delivering (`delivering`): that stream
   * settles its own hold, charged for what it delivered.
   */
  const abandonInterrupted = <E>(p: Plan, cause: Cause.Cause<E>): Effect.Effect<never, E> =>
    delivering.has(p) ? Effect.failCause(cause) : Effect.zipRight(abandon(p, "interrupted", "The gateway shut down before the upstream answered.", []), Effect.failCause(cause))

  const fromRouteFailure = (p: Plan, failed: RouteFailed) =>
    Effect.zipRight(
      abandon(p, failed.error._tag === "InvalidRequest" ? "invalid_request_error" : "route_unavailable", failed.error.message, failed.attempts),
      Effect.fail(failed.error)
    )

  /**
   * The upstream leg and its settlement, held by callbacks rather than a fiber (docs/decisions/0033):
   * this effect starts it and returns; `done` is told the call's reply once its settlement is
   * written, or its hold voided. While the upstream answers, nothing of the call's fiber is alive —
   * only the plan and the request's own callbacks — so the calls in flight cost the young generation
   * a fraction of what suspended fibers did (0032).
   *
   * Until `done`, the call is kept alive (`liveCalls`: its hold and claim pushed ahead) and can be
   * stopped (`legs`: shutdown aborts the upstream). What follows the upstream runs uninterruptibly in
   * a fiber of the caller's runtime: an answer is settled, and a leg that ended otherwise —
   * stopped (shutdown), a defect, no route answered — voids the hold once and frees the key. A
   * client that hangs up stops nothing: the call is settled all the same.
   */
  const leg = (p: Plan, principal: Principal, done: (exit: Exit.Exit<GatewayReply, GovernanceError>) => void): Effect.Effect<void> =>
    Effect.clockWith((clock) => Effect.map(Effect.runtime<never>(), (runtime) => startLeg(p, principal, runtime, clock, done)))

  /** `leg` with no effect around it, for a call whose plan ran with no fiber (the Gateway's `begin`). */
  const startLeg = (p: Plan, principal: Principal, runtime: Runtime.Runtime<never>, clock: Clock.Clock, done: (exit: Exit.Exit<GatewayReply, GovernanceError>) => void): void =>
    new Leg(p, principal, runtime, clock, done).begin()

  /**
   * One non-streamed call's leg (`leg`): its state one object, since it lives through the upstream's
   * wait and every scavenge meanwhile copies what it holds (docs/decisions/0034). It is the call's
   * entry in `legs`: its `abort` stops the upstream.
   */
  class Leg implements Abortable {
    private upstream: Abortable | undefined = undefined
    /** Traced, the upstream's span is opened here and ended by the answer (no fiber spans the wait). */
    private readonly traceSpan: Tracer.Span | undefined

    constructor(
      private readonly p: Plan,
      private readonly principal: Principal,
      private readonly runtime: Runtime.Runtime<never>,
      private readonly clock: Clock.Clock,
      private readonly done: (exit: Exit.Exit<GatewayReply, GovernanceError>) => void
    ) {
      this.traceSpan = traced ? Runtime.runSync(runtime)(Effect.makeSpan("tollgate.upstream", { kind: "client", attributes: { "tollgate.request_id": p.requestId } })) : undefined
    }

    begin(): void {
      const p = this.p
      liveCalls.add(p)
      legs.set(p, this)
      this.upstream = router.start(this.runtime, this.clock, p.chain, () => upstreamBody(p.body, p.request, p.outputCap), (exit) => this.answered(exit))
    }

    abort(): void {
      this.upstream?.abort()
    }

    private answered(exit: Exit.Exit<Served<UpstreamReply>, RouteFailed>): void {
      if (this.traceSpan !== undefined) this.traceSpan.end(this.clock.unsafeCurrentTimeNanos(), exit)
      timeline.mark("upstream: router bookkeeping, back in the call")
      // Settle and abandon are uninterruptible themselves, and nothing else holds this fiber. Called
      // from undici's callbacks: a throw of ours while building the next step (a reply it cannot
      // read, a bug) is that step's defect, answered as one, never an exception in undici's handler
      // that would leave the call in flight for ever.
      let next: Effect.Effect<GatewayReply, GovernanceError>
      try {
        if (Exit.isSuccess(exit) && settleNow !== undefined) return this.settleByCallback(exit.value, settleNow)
        next = Exit.isSuccess(exit) ? settleServed(this.p, this.principal, exit.value) : upstreamFailed(this.p, exit.cause)
      } catch (defect) {
        next = Effect.die(defect)
      }
      Runtime.runFork(this.runtime)(next).addObserver((end) => this.ended(end))
    }

    /**
     * The common path's settlement, with no fiber (docs/decisions/0036): the same transaction as
     * `settleServed`'s, posted by the store's callback (`settleNow`).
     */
    private settleByCallback(served: Served<UpstreamReply>, post: NonNullable<typeof settleNow>): void {
      post(this.p, this.principal, servedSettlement(this.p, served), this.clock.unsafeCurrentTimeMillis(), (written) => {
        if (Exit.isSuccess(written)) return this.ended(Exit.succeed({ _tag: "Body", ...written.value }))
        Runtime.runFork(this.runtime)(Effect.zipRight(unsettled(this.p, written.cause, served.attempts), Effect.failCause(written.cause))).addObserver((end) => this.ended(end))
      })
    }

    private ended(end: Exit.Exit<GatewayReply, GovernanceError>): void {
      timeline.mark("the leg's fiber ends")
      liveCalls.delete(this.p)
      legs.delete(this.p)
      this.done(end)
    }
  }

  /** A leg that ended without an answer: nothing was charged, so the hold is voided, with the reason. */
  const upstreamFailed = (p: Plan, cause: Cause.Cause<RouteFailed>): Effect.Effect<never, GovernanceError> => {
    if (Cause.isInterruptedOnly(cause)) return abandonInterrupted(p, cause as Cause.Cause<never>)
    const failed = Cause.failureOption(cause)
    if (Cause.isDie(cause)) {
      return Effect.zipRight(
        abandon(p, "internal_error", "The gateway failed while calling the upstream; nothing was charged.", []),
        Option.isSome(failed) ? Effect.fail(failed.value.error) : Effect.failCause(cause as Cause.Cause<never>)
      )
    }
    return Option.isSome(failed) ? fromRouteFailure(p, failed.value) : Effect.failCause(cause as Cause.Cause<never>)
  }

  /** What a served completion is charged for (reported usage, or counted), and how its reply renders. */
  const servedSettlement = (p: Plan, served: Served<UpstreamReply>): Charged => {
    const json = served.value.json
    const choices = json.choices
    const schemaOk = Array.isArray(choices) && choices.length > 0 && choices.every((c) => c !== null && typeof c === "object" && "message" in c)
    const { tokens, source } = chargedTokens(json.usage, p.inputTokens, () =>
      Array.isArray(choices) ? choices.reduce((n: number, c: { message?: unknown }) => n + countText(deliveredText(c?.message)), 0) : 0
    )
    const render = (g: Governance, now: number) => ({ status: 200, contentType: "application/json", body: p.surface.renderBody(served.value.raw, json, g, tokens, now) })
    return { served, tokens, usageSource: source, schemaOk, render }
  }

  const settleServed = (p: Plan, principal: Principal, served: Served<UpstreamReply>): Effect.Effect<GatewayReply, GovernanceError> =>
    settle(p, principal, servedSettlement(p, served), (stored): GatewayReply => ({ _tag: "Body", ...stored }))

  return { abandon, abandonInterrupted, settle, settleNow, fromRouteFailure, leg, startLeg } as const
}

export type Settlement = ReturnType<typeof makeSettlement>
