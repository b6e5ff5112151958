/**
 * The plan of a governed call, everything up to and including the reservation: admit (parse, scope,
 * client cap) → rate check → idempotency key → count → route and price → the one reserve transaction
 * (claim, sizing, pending row, hold). Also the read-only quote that POST /v1/routing/evaluate shows.
 */
import { Effect, Either, Option } from "effect"
import type { Prices } from "../../../spec/pricing.ts"
import { sizeInScopes, type SizingRequest } from "../../domain/budgetSizing.ts"
import { type ChatRequest, IDEMPOTENCY_KEY, MAX_CREDITS, oneValueOf, parseChatRequest, parseMaxCredits } from "../../domain/chat.ts"
import { BudgetExceeded, type GovernanceError, IdempotencyConflict, InvalidApiKey, InvalidRequest, type RateLimited, RouteUnavailable, type UnsupportedWorkflow } from "../../domain/errors.ts"
import { newRequestId, newReservationId } from "../../domain/ids.ts"
import { timeline } from "../../domain/timeline.ts"
import { checkKey, type ClaimOutcome, fingerprintOf, type Scope as TenantScope, type StoredResult } from "../IdempotencyStore.ts"
import { callLimits, type Principal } from "../KeyRegistry.ts"
import { available } from "../../../spec/ledger.ts"
import { windowOfCall } from "../Ledger.ts"
import { rateLimitHeaders, type RateVerdict } from "../RateLimiter.ts"
import type { CallLimits, LimitsTaken, ScopeLimits } from "../UpstreamLimits.ts"
import type { Route } from "../Router.ts"
import type { Reserved, ReserveArgs, ReserveRefused } from "../../store/ChatStore.ts"
import type { ExhaustedScope } from "../../store/eventsRepo.ts"
import { countChatInput, countChatInputNow } from "../Tokenizer.ts"
import type { ChatCall, GatewayContext, GatewayReply, Plan, Quote, ReplyHeaders, Routed } from "./types.ts"

interface Admitted {
  readonly request: ChatRequest
  readonly maxCredits: number | undefined
  readonly maxCreditsParam: string
}

/** A call admitted up to its rate check, with its idempotency key (checked), if any. */
export interface Keyed extends Admitted {
  readonly key: string | undefined
}

/** A routed call's reservation: the transaction's arguments, and what its plan will hold once it commits. */
export interface Reservation {
  readonly args: ReserveArgs
  readonly requestId: string
  readonly request: ChatRequest
  readonly chain: Plan["chain"]
  readonly prices: Plan["prices"]
  readonly inputTokens: number
  readonly hold: Omit<Plan["hold"], "amount">
  readonly key: string | undefined
  readonly fingerprint: string
  readonly scope: TenantScope
}

/**
 * The rest of a plan as an effect, from the step its pure steps could not take (`planNow`): the
 * reservation to make, or the reply that answers the call without one (a replay).
 */
export type PlanRest = Effect.Effect<Reservation | GatewayReply, GovernanceError>

/** Whether a route carries a provider quota (its config's `rate_limit`). */
const hasQuota = (r: Route): boolean => r.rate_limit !== undefined

/** A route's quota as upstream limits: its requests a minute (one a call) and its tokens a minute. */
const routeLimits = (r: Route): CallLimits => {
  const q = r.rate_limit!
  const out: Array<ScopeLimits> = []
  if (q.requests_per_minute !== undefined) out.push({ scope: "route", id: `q:${r.name}`, tokensPerMinute: q.requests_per_minute, maxConcurrent: undefined, countsRequests: true })
  if (q.tokens_per_minute !== undefined) out.push({ scope: "route", id: `r:${r.name}`, tokensPerMinute: q.tokens_per_minute, maxConcurrent: undefined })
  return out
}

const scopeOf = (principal: Principal): TenantScope => ({ projectId: principal.projectId, environment: principal.environment })

/**
 * Parse the body and check the metadata scope and client cap: the steps before the rate check.
 * Synchronous, like everything in a governed call but the reservation, the upstream call and the
 * settlement: the hot path pays the Effect runtime only around those (bench/README.md).
 */
export const admitRequest = (
  principal: Principal,
  body: unknown,
  maxCreditsHeader: string | undefined
): Either.Either<Admitted, InvalidApiKey | InvalidRequest | UnsupportedWorkflow> => {
  const parsed = parseChatRequest(body)
  if (Either.isLeft(parsed)) return Either.left(parsed.left)
  const request = parsed.right
  const md = request.metadata
  if (md.project_id !== undefined && md.project_id !== principal.projectId) {
    return Either.left(new InvalidApiKey({ message: "This API key is scoped to another project than metadata.project_id." }))
  }
  if (md.environment !== undefined && md.environment !== principal.environment) {
    return Either.left(new InvalidApiKey({ message: "This API key is scoped to another environment than metadata.environment." }))
  }
  // One cap: a header and a different metadata value are refused, never resolved to either (oneValueOf).
  return Either.flatMap(oneValueOf(MAX_CREDITS, md.max_credits, maxCreditsHeader), ({ value, param }) =>
    Either.map(parseMaxCredits(value, param), (maxCredits) => ({ request, maxCredits, maxCreditsParam: param }))
  )
}

export const makePlanning = (ctx: GatewayContext) => {
  const { settings, rateLimiter, idempotency, router, pricing, ledger, instance } = ctx

  const replay = (result: StoredResult, headers: ReplyHeaders): GatewayReply => {
    headers["x-request-id"] = result.requestId
    headers["idempotent-replayed"] = "true"
    return { _tag: "Body", status: result.status, contentType: result.contentType, body: result.body }
  }

  /** Turn a claim outcome that is not ours into a reply, waiting for an in-flight original. */
  const settleClaimOutcome = (
    outcome: ClaimOutcome,
    scope: TenantScope,
    key: string,
    fingerprint: string,
    headers: ReplyHeaders
  ): Effect.Effect<Option.Option<GatewayReply>, IdempotencyConflict> =>
    Effect.gen(function* () {
      let current = outcome
      if (current._tag === "InFlight") current = yield* idempotency.awaitSettled(scope, key, fingerprint, settings.inflightWaitMs)
      switch (current._tag) {
        case "Replay":
          return Option.some(replay(current.result, headers))
        case "Conflict":
          return yield* new IdempotencyConflict({
            message: "This idempotency key was already used with a different request body. Reuse the original payload, or generate a new idempotency key."
          })
        default:
          return Option.none()
      }
    })

  /** Route and price a request at `now` with its counted input: everything the reservation sizes. Reads no store. */
  const route = (
    principal: Principal,
    request: ChatRequest,
    maxCredits: number | undefined,
    maxCreditsParam: string,
    now: number,
    inputTokens: number,
    /** Routes at their quota now (an `auto` call falls back past them). */
    exhausted?: ReadonlySet<string>
  ): Either.Either<Routed, RouteUnavailable> => {
    const candidates = router.candidatesAt(request.model, principal.projectId, now)
    if (Either.isLeft(candidates)) return Either.left(candidates.left)
    const prices = new Map<string, { prices: Prices; version: string }>()
    for (const r of candidates.right) {
      const priced = pricing.priceAt(r.name, now)
      if (priced !== undefined) prices.set(r.name, { prices: priced.prices, version: priced.card.version })
    }
    const chain = candidates.right.filter((r) => prices.has(r.name) && exhausted?.has(r.name) !== true)
    if (chain.length === 0) {
      return Either.left(new RouteUnavailable({ message: `No rate card in force prices the route for '${request.model}'.`, retryable: false }))
    }
    const sizing: SizingRequest = {
      chain: chain.map((r) => ({ name: r.name, prices: prices.get(r.name)!.prices, routeLimit: r.max_output_tokens })),
      inputTokens,
      requested: request.requestedMaxTokens,
      maxCredits,
      maxCreditsParam,
      // The window the call falls in: its project's budget period in its time zone, at its start.
      period: windowOfCall(principal, now)
    }
    return Either.right({ chain, prices, inputTokens, sizing })
  }

  /** Route, price and size a request at `now` against the project's remaining budget. Reads only. */
  const quote = (
    principal: Principal,
    request: ChatRequest,
    maxCredits: number | undefined,
    maxCreditsParam: string,
    now: number,
    inputTokens: number
  ): Effect.Effect<Quote, RouteUnavailable> =>
    Effect.flatMap(route(principal, request, maxCredits, maxCreditsParam, now, inputTokens), (r) =>
      Effect.map(ledger.scopeWindows({ projectId: principal.projectId, period: r.sizing.period, keyId: principal.keyId, endUser: request.endUser }), (scopes): Quote => {
      // Sized as the reservation sizes it: on every scope the call would be held in (spec/scopes.ts).
      const project = scopes[0]!
      const sized = sizeInScopes(r.sizing, scopes)
      return {
        chain: r.chain,
        prices: r.prices,
        inputTokens: r.inputTokens,
        period: r.sizing.period,
        cap: project.cap,
        remaining: available(project),
        scopes,
        decision: sized._tag === "Fits" ? sized : { _tag: "OverBudget", error: new BudgetExceeded({ message: sized.message, param: sized.param }) }
      }
    }))

  /**
   * The rate check, one request taken from the project's limit, its headers set on the reply; then
   * `next` with the verdict. The in-memory limiter answers synchronously (no Effect step on the hot
   * path); a shared one (Redis, or PostgreSQL) is one round trip.
   */
  const admitRate = <A, E>(
    principal: Principal,
    now: number,
    headers: ReplyHeaders,
    next: (verdict: RateVerdict) => Effect.Effect<A, E>
  ): Effect.Effect<A, E | RateLimited> => {
    const local = admitRateNow(principal, now, headers)
    if (local !== undefined) return Either.isLeft(local) ? Effect.fail(local.left) : next(local.right)
    return Effect.flatMap(rateLimiter.admit(principal.projectId, principal.rateLimit), (verdict) => {
      Object.assign(headers, rateLimitHeaders(verdict))
      return next(verdict)
    })
  }

  /** The in-memory limiter's verdict, its headers set on the reply; undefined when the limiter is shared (one round trip). */
  const admitRateNow = (principal: Principal, now: number, headers: ReplyHeaders): Either.Either<RateVerdict, RateLimited> | undefined => {
    if (rateLimiter.mode !== "local") return undefined
    const verdict = rateLimiter.admitAt(principal.projectId, principal.rateLimit, now)
    if (Either.isRight(verdict)) {
      Object.assign(headers, rateLimitHeaders(verdict.right))
      timeline.mark("rate check")
    }
    return verdict
  }

  /**
   * Everything before the rate check, pure: parse, scope, client cap, and the idempotency key (from
   * the body or the header, never two different ones).
   */
  const admitCall = (call: ChatCall): Either.Either<Keyed, GovernanceError> => {
    const admitted = admitRequest(call.principal, call.body, call.maxCreditsHeader)
    if (Either.isLeft(admitted)) return Either.left(admitted.left)
    timeline.mark("admit: schema, scope, cap")
    const md = admitted.right.request.metadata
    const sent = oneValueOf(IDEMPOTENCY_KEY, md.idempotency_key, call.idempotencyKeyHeader)
    if (Either.isLeft(sent)) return Either.left(sent.left)
    const { value, param } = sent.right
    const checked = value === undefined ? Either.right(undefined) : checkKey(value, param)
    if (Either.isLeft(checked)) return Either.left(checked.left)
    return Either.right({ ...admitted.right, key: checked.right })
  }

  /**
   * The plan's steps that need no effect, in their order, at `now`: admit, the in-memory rate check,
   * count, route, price, ids. Where they stop: a refusal; the reservation to make; or, when a step
   * needs an effect — a shared rate limiter's round trip, a prompt counted slice by slice, no route
   * for a keyed call (a replay still answers) —, the rest of the plan as that effect (`PlanRest`).
   * The Gateway runs them with no fiber (docs/decisions/0037), and the rest in one.
   */
  const planNow = (call: ChatCall, now: number): Either.Either<Reservation | PlanRest, GovernanceError> => {
    const admitted = admitCall(call)
    if (Either.isLeft(admitted)) return Either.left(admitted.left)
    const a = admitted.right
    const rate = admitRateNow(call.principal, now, call.headers)
    if (rate === undefined) return Either.right(admitRate(call.principal, now, call.headers, () => planAdmitted(call, now, a)))
    if (Either.isLeft(rate)) return Either.left(rate.left)
    const counted = countChatInputNow(a.request.messages, a.request.tools)
    if (counted === undefined) return Either.right(planAdmitted(call, now, a))
    timeline.mark("count input tokens")
    return planCounted(call, now, a, counted)
  }

  /** Where the pure steps stopped, taken on as an effect: the refusal, the reservation, or the rest. */
  const planFrom = (next: Either.Either<Reservation | PlanRest, GovernanceError>): PlanRest =>
    Either.isLeft(next) ? Effect.fail(next.left) : Effect.isEffect(next.right) ? next.right : Effect.succeed(next.right)

  /** The request's idempotency fingerprint (the client's body, as sent), when it carries a key. */
  const fingerprintOf_ = (call: ChatCall, key: string | undefined): string =>
    key === undefined ? "" : fingerprintOf("POST", call.surface.path, call.clientBody ?? call.body)

  /** The rest of the plan once the rate limit admitted the call, its prompt counted in bounded slices. */
  const planAdmitted = (call: ChatCall, now: number, admitted: Keyed): PlanRest =>
    // Counted after the rate check, in bounded slices (src/services/Tokenizer.ts): a long prompt
    // never holds the event loop, and a limited caller gets no tokenizer time.
    Effect.flatMap(countChatInput(admitted.request.messages, admitted.request.tools), (counted) => {
      timeline.mark("count input tokens")
      return planFrom(planCounted(call, now, admitted, counted))
    })

  /**
   * A counted call: its reservation, or — no route for a keyed call — the lookup of its key as the
   * rest; a call whose project or key sets upstream limits takes its tokens and slots first.
   */
  const planCounted = (call: ChatCall, now: number, admitted: Keyed, counted: number): Either.Either<Reservation | PlanRest, GovernanceError> => {
    const fingerprint = fingerprintOf_(call, admitted.key)
    const r = reservationOf(call, now, admitted, fingerprint, counted)
    if (Either.isLeft(r)) return Either.right(unroutable(call, now, admitted, fingerprint, r.left))
    const limits = callLimits(call.principal, admitted.request.endUser)
    if (call.limitsTaken !== undefined || (limits === undefined && !r.right.chain.some(hasQuota))) return r
    const exhausted = new Set<string>()
    return takeLimits(call, limits ?? [], r.right, now, (route) => {
      exhausted.add(route)
      return reservationOf(call, now, admitted, fingerprint, counted, exhausted)
    })
  }

  /**
   * The call's estimate — its prompt and the most its first route may generate for it — taken from
   * every upstream limit of its project and key and its first route's quota, with a slot of each
   * in-flight limit: all or none. A route at its quota: an `auto` call tries again on the rest of
   * its chain (`without`), a pinned one is refused naming the route's limit.
   */
  const takeLimits = (
    call: ChatCall,
    limits: CallLimits,
    r: Reservation,
    now: number,
    without: (route: string) => Either.Either<Reservation, RouteUnavailable>
  ): Either.Either<Reservation | PlanRest, RateLimited> => {
    const first = r.chain[0]!
    const tokens = r.inputTokens + Math.min(r.request.requestedMaxTokens ?? first.max_output_tokens, first.max_output_tokens)
    const all = first.rate_limit === undefined ? limits : [...limits, ...routeLimits(first)]
    const taken = (t: LimitsTaken): Reservation => {
      call.limitsTaken = t
      if (t.headers !== undefined) Object.assign(call.headers, t.headers)
      return r
    }
    /** Refused by the route's quota: the next route of an `auto` chain, if there is one. */
    const next = (refused: RateLimited): Either.Either<Reservation, RateLimited> | undefined => {
      if (!refused.param?.startsWith("route.") || r.request.model !== "auto") return undefined
      const rest = without(first.name)
      return Either.isLeft(rest) ? Either.left(refused) : Either.right(rest.right)
    }
    const upstream = rateLimiter.upstream
    if (upstream.takeNow !== undefined) {
      const d = upstream.takeNow(all, r.requestId, tokens, now)
      if (Either.isRight(d)) return Either.right(taken(d.right))
      const fallback = next(d.left)
      return fallback === undefined ? Either.left(d.left) : Either.flatMap(fallback, (r2) => takeLimits(call, limits, r2, now, without))
    }
    return Either.right(
      Effect.catchAll(Effect.map(upstream.take(all, r.requestId, tokens), taken), (refused): PlanRest => {
        const fallback = next(refused)
        return fallback === undefined ? Effect.fail(refused) : Either.isLeft(fallback) ? Effect.fail(fallback.left) : planFrom(takeLimits(call, limits, fallback.right, now, without))
      })
    )
  }

  /** No route: a replay (or a conflict, or an original in flight) answers even when the route is gone. */
  const unroutable = (call: ChatCall, now: number, admitted: Keyed, fingerprint: string, error: RouteUnavailable): PlanRest => {
    const key = admitted.key
    if (key === undefined) return Effect.fail(error)
    const scope = scopeOf(call.principal)
    return Effect.flatMap(idempotency.peekAt(scope, key, fingerprint, now), (seen) =>
      seen._tag === "Claimed"
        ? Effect.fail(error)
        : Effect.flatMap(settleClaimOutcome(seen, scope, key, fingerprint, call.headers), (reply) =>
            Option.isSome(reply) ? Effect.succeed<GatewayReply>(reply.value) : Effect.fail(error)
          )
    )
  }

  /**
   * Route and price the counted request, and make its ids and hold: the reservation's arguments and
   * what its plan will hold. Pure but for the request id it sets on the reply's headers.
   */
  const reservationOf = (
    call: ChatCall,
    now: number,
    admitted: Keyed,
    fingerprint: string,
    counted: number,
    exhausted?: ReadonlySet<string>
  ): Either.Either<Reservation, RouteUnavailable> => {
    const { principal, headers, surface } = call
    const { request, key } = admitted
    const routed = route(principal, request, admitted.maxCredits, admitted.maxCreditsParam, now, counted, exhausted)
    if (Either.isLeft(routed)) return Either.left(routed.left)
    const { chain, prices, inputTokens, sizing } = routed.right
    const requestId = newRequestId(now)
    headers["x-request-id"] = requestId
    const hold = {
      reservationId: newReservationId(now),
      requestId,
      projectId: principal.projectId,
      period: sizing.period,
      deadline: now + settings.reservationTtlMs,
      // The call is held in its key's and its end user's scopes too (spec/scopes.ts).
      keyId: principal.keyId,
      endUser: request.endUser
    }
    const first = chain[0]!
    const scope = scopeOf(principal)
    timeline.mark("route, price, ids")
    // One transaction (src/store/chatTransactions.ts): the claim — a replay, a conflict or an
    // original in flight answers first —, the output cap and hold sized on the budget window as
    // it is in that transaction, the pending request row and the hold.
    const args: ReserveArgs = {
      now,
      epoch: instance.epoch,
      claim: key === undefined ? undefined : { scope, key, fingerprint },
      request: {
        id: requestId,
        projectId: principal.projectId,
        environment: principal.environment,
        keyId: principal.keyId,
        endpoint: surface.path,
        model: request.model,
        route: first.name,
        stream: request.stream,
        idempotencyKey: key ?? null,
        rateCardVersion: prices.get(first.name)!.version,
        createdAt: now
      },
      hold,
      sizing
    }
    return Either.right({ args, requestId, request, chain, prices, inputTokens, hold, key, fingerprint, scope })
  }

  /** The plan of a call whose reservation committed. */
  const plannedOf = (call: ChatCall, r: Reservation, reserved: Reserved): Plan => {
    timeline.mark("reserve: resume the call")
    return {
      requestId: r.requestId,
      request: r.request,
      body: call.body as Record<string, unknown>,
      surface: call.surface,
      chain: r.chain,
      prices: r.prices,
      inputTokens: r.inputTokens,
      outputCap: reserved.outputCap,
      hold: { ...r.hold, amount: reserved.reservation },
      idempotency: r.key === undefined ? undefined : { key: r.key, fingerprint: r.fingerprint },
      scope: r.scope
    }
  }

  /** The scope a store refusal names (a 402's `param`), in the refused hold's window; none for a client's own max_credits. */
  const exhaustedScope = (r: Reservation, param: string | null): ExhaustedScope | undefined => {
    const h = r.args.hold
    switch (param) {
      case "project":
        return { scope: "project", projectId: h.projectId, period: h.period }
      case "key":
        return h.keyId === undefined ? undefined : { scope: "key", projectId: h.projectId, keyId: h.keyId, period: h.period }
      case "end_user":
        return h.endUser === undefined ? undefined : { scope: "end_user", projectId: h.projectId, endUser: h.endUser, period: h.period }
      default:
        return undefined
    }
  }

  /**
   * A reservation refused: over budget, or its idempotency key claimed already — a replay, a
   * conflict, or an original in flight, waited for. None: the original was released while the call
   * waited, and the call plans again, as a fresh request.
   */
  const refusal = (call: ChatCall, r: Reservation, refused: ReserveRefused): Effect.Effect<Option.Option<GatewayReply>, GovernanceError> => {
    switch (refused._tag) {
      case "OverBudget": {
        const refusal = Effect.fail(new BudgetExceeded({ message: refused.message, param: refused.param }))
        const exhausted = exhaustedScope(r, refused.param)
        // budget.exhausted, committed before the 402 the first time this process sees the scope's window (src/services/Events.ts).
        return exhausted === undefined || ctx.events === undefined ? refusal : Effect.zipRight(ctx.events.exhausted(exhausted), refusal)
      }
      case "Shed":
        return Effect.fail(refused.error)
      case "ClaimLost":
        return settleClaimOutcome(refused.outcome, r.scope, r.key!, r.fingerprint, call.headers)
    }
  }

  return { planNow, quote, admitRate, plannedOf, refusal } as const
}
