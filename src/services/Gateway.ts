/**
 * The governed call (docs/contract.md §3), in this order:
 *   authenticate (done by the caller) → validate workflow → rate check → idempotency claim → route →
 *   price estimate → budget reservation → upstream call (retries / fallback) →
 *   settle (charge, receipt, idempotent result in ONE transaction) → respond.
 *
 * A 401/422/429 touches neither budget nor idempotency state. The claim, the pending request row
 * and the reservation are written in one transaction; so are the charge, the receipt, the request's
 * completion and the stored idempotent result. A failure that charged nothing voids the hold and
 * frees the idempotency key in one transaction.
 *
 * The same pipeline serves every surface (chat completions, responses); a Surface only renders.
 */
import { Clock, Duration, Effect, Either, Exit, Fiber, FiberSet, Option, Runtime, Schedule, Scope } from "effect"
import { chargeFor, chargeWithinReservation, type Prices, settledCharge, type TokenCounts, tokensFromUsage } from "../../spec/pricing.ts"
import { type ChatRequest, parseChatRequest, parseMaxCredits, upstreamBody } from "../domain/chat.ts"
import { Settings } from "../domain/config.ts"
import { BudgetExceeded, type GovernanceError, IdempotencyConflict, InvalidApiKey, InvalidRequest, type RateLimited, RouteUnavailable, type UnsupportedWorkflow } from "../domain/errors.ts"
import { newReceiptId, newRequestId, newReservationId } from "../domain/ids.ts"
import { ChatStore } from "../store/ChatStore.ts"
import type { ProgressMark } from "../store/epochs.ts"
import { crashPoint } from "../domain/crashPoint.ts"
import { UpstreamFailure } from "../providers/Provider.ts"
import { checkKey, type ClaimOutcome, fingerprintOf, IdempotencyStore, type Scope as TenantScope, type StoredResult } from "./IdempotencyStore.ts"
import { Instance } from "./Instance.ts"
import type { Principal } from "./KeyRegistry.ts"
import { type Hold, Ledger, periodOf } from "./Ledger.ts"
import { Metrics } from "./Metrics.ts"
import { Pricing } from "./Pricing.ts"
import { RateLimiter, rateLimitHeaders } from "./RateLimiter.ts"
import type { Attempt, Verification } from "./Requests.ts"
import { type Route, RouteFailed, Router } from "./Router.ts"
import { sizeReservation, type SizingRequest } from "../domain/budgetSizing.ts"
import { deliveredText, type Governance, type Surface } from "./surfaces/Surface.ts"
import { countBounded, countChatInput, countText } from "./Tokenizer.ts"

export type { Governance } from "./surfaces/Surface.ts"

/**
 * Bodies bound for the store worker are encoded into their own exact-size buffers: a small Buffer
 * from node's pool is a view on a shared 8 KiB ArrayBuffer, and posting it to the worker clones
 * the whole 8 KiB.
 */
const utf8 = new TextEncoder()

export type GatewayReply =
  | { readonly _tag: "Body"; readonly status: number; readonly contentType: string; readonly body: Uint8Array | string }
  | {
      readonly _tag: "Sse"
      /** The frames to send, in order, a batch per upstream read. Stop when `cancel` was called. */
      readonly frames: AsyncIterable<Uint8Array>
      /** The client went away: stop reading the upstream; the Gateway settles for what was delivered. */
      readonly cancel: () => void
    }

/** Headers gathered along the pipeline (rate limit, request id, replay flag), sent with success or error. */
export type ReplyHeaders = Record<string, string>

export interface ChatCall {
  readonly principal: Principal
  readonly surface: Surface
  /** The OpenAI chat completion body to govern (for /v1/responses: the translated body). */
  readonly body: unknown
  /** What the client sent, for the idempotency fingerprint (defaults to `body`). */
  readonly clientBody?: unknown
  readonly idempotencyKeyHeader: string | undefined
  readonly maxCreditsHeader: string | undefined
  /** Filled as the pipeline proceeds. */
  readonly headers: ReplyHeaders
}

const CHECKS = ["route", "schema", "budget"] as const

/** The checks a completed call reports, and which of them failed. */
export const verificationOf = (passed: Record<(typeof CHECKS)[number], boolean>): Verification => {
  const failed = CHECKS.filter((c) => !passed[c])
  return { state: failed.length === 0 ? "verified" : "unverified", checks: [...CHECKS], failed_checks: failed }
}

/** Where a request would go and what it would cost per token: routing and pricing, before any budget question. */
interface Routed {
  readonly chain: ReadonlyArray<Route>
  readonly prices: ReadonlyMap<string, { readonly prices: Prices; readonly version: string }>
  readonly inputTokens: number
  readonly sizing: SizingRequest
}

/** Route, prices and the worst case of a request against a budget window (POST /v1/routing/evaluate). */
export interface Quote {
  readonly chain: ReadonlyArray<Route>
  readonly prices: Routed["prices"]
  readonly inputTokens: number
  readonly period: string
  readonly cap: number
  readonly remaining: number
  readonly decision:
    | { readonly _tag: "Fits"; readonly outputCap: number; readonly reservation: number }
    | { readonly _tag: "OverBudget"; readonly error: BudgetExceeded }
}

interface Plan {
  readonly requestId: string
  readonly request: ChatRequest
  readonly body: Record<string, unknown>
  readonly surface: Surface
  readonly chain: ReadonlyArray<Route>
  readonly prices: Quote["prices"]
  readonly inputTokens: number
  readonly outputCap: number
  readonly hold: Hold
  readonly idempotency: { readonly key: string; readonly fingerprint: string } | undefined
  readonly scope: TenantScope
}

interface Admitted {
  readonly request: ChatRequest
  readonly maxCredits: number | undefined
  readonly maxCreditsParam: string
}

/**
 * Parse the body and check the metadata scope and client cap: the steps before the rate check.
 * Synchronous, like everything in a governed call but the reservation, the upstream call and the
 * settlement: the hot path pays the Effect runtime only around those (bench/README.md).
 */
const admitRequest = (
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
  const maxCreditsParam = md.max_credits !== undefined ? "metadata.max_credits" : "X-Max-Credits"
  return Either.map(parseMaxCredits(md.max_credits ?? maxCreditsHeader, maxCreditsParam), (maxCredits) => ({ request, maxCredits, maxCreditsParam }))
}

export class Gateway extends Effect.Service<Gateway>()("tollgate/Gateway", {
  scoped: Effect.gen(function* () {
    const settings = yield* Settings
    /**
     * A span of the governed call, only when traces are exported (OTEL_EXPORTER_OTLP_ENDPOINT): even a
     * disabled tracer's no-op spans cost the chat path measurably (≈ 35% of closed-loop throughput in
     * `npm run bench -- --quick`, five spans a call), so without an exporter the call runs unwrapped.
     */
    const span: (name: string, options: { readonly kind?: "server" | "client"; readonly attributes: Record<string, unknown> }) => <A, E, R>(
      self: Effect.Effect<A, E, R>
    ) => Effect.Effect<A, E, R> = Option.isSome(settings.otlpTracesUrl) ? (name, options) => Effect.withSpan(name, options) : () => (self) => self
    const store = yield* ChatStore
    const rateLimiter = yield* RateLimiter
    const idempotency = yield* IdempotencyStore
    const router = yield* Router
    const pricing = yield* Pricing
    const ledger = yield* Ledger
    const metrics = yield* Metrics
    // Upstream calls run in fibers owned by the service, so a client that hangs up does not abandon
    // a call whose charge must still be settled; shutdown interrupts them and their holds are voided.
    const inflight = yield* FiberSet.make<unknown, unknown>()
    /** Callers' fibers the service owns (`adopt`): a call running in one needs no fiber of its own. */
    const adopted = new WeakSet<Fiber.RuntimeFiber<unknown, unknown>>()

    const instance = yield* Instance

    // A call may outlive the reservation TTL (a stream always can; a non-streamed call whose upstream
    // trickles its body can): while it runs, its hold and idempotency claim are pushed a TTL ahead
    // every third of a TTL, so the recovery sweep never takes them and a retry never runs it twice
    // (issue 19, finding 3). One timer for every call in flight (a call registers for its lifetime),
    // not a fiber and a timer per call.
    const liveCalls = new Set<Plan>()
    const keepCallsAlive = Effect.gen(function* () {
      if (liveCalls.size === 0) return
      const deadline = (yield* Clock.currentTimeMillis) + settings.reservationTtlMs
      yield* store.extend({
        deadline,
        streams: Array.from(liveCalls, (p) => ({
          reservationId: p.hold.reservationId,
          requestId: p.requestId,
          idempotent: p.idempotency === undefined ? undefined : { scope: p.scope, key: p.idempotency.key }
        }))
      })
    })
    const logged = (what: string) => (e: Effect.Effect<void>) =>
      Effect.catchAllCause(e, (cause) => Effect.logWarning(`${what} failed; retrying at the next beat`, cause))
    yield* Effect.forkScoped(Effect.repeat(Effect.delay(logged("keeping holds alive")(keepCallsAlive), Duration.millis(settings.reservationTtlMs / 3)), Schedule.forever))

    // The heartbeat: this epoch is alive, and each open stream's progress mark (route, rate card and
    // the tokens delivered so far) is written durably when it changed, so a crash charges what the
    // client received (src/services/Recovery.ts). What a stream delivered after its last mark — at
    // most one beat — is not charged if the process dies.
    const streamMarks = new Map<Plan, () => ProgressMark | undefined>()
    /** How to end each open stream (shutdown past its grace). */
    const streamCancels = new Map<Plan, () => void>()
    const beat = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const marks: Array<{ reservationId: string; mark: ProgressMark }> = []
      for (const [p, next] of streamMarks) {
        const mark = next()
        if (mark !== undefined) marks.push({ reservationId: p.hold.reservationId, mark: { ...mark, at: now } })
      }
      yield* store.heartbeat({ epoch: instance.epoch, now, marks })
    })
    yield* Effect.forkScoped(Effect.repeat(Effect.delay(logged("heartbeat")(beat), Duration.millis(settings.heartbeatMs)), Schedule.forever))

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
      inputTokens: number
    ): Either.Either<Routed, RouteUnavailable> => {
      const candidates = router.candidatesAt(request.model, principal.projectId, now)
      if (Either.isLeft(candidates)) return Either.left(candidates.left)
      const prices = new Map<string, { prices: Prices; version: string }>()
      for (const r of candidates.right) {
        const priced = pricing.priceAt(r.name, now)
        if (priced !== undefined) prices.set(r.name, { prices: priced.prices, version: priced.card.version })
      }
      const chain = candidates.right.filter((r) => prices.has(r.name))
      if (chain.length === 0) {
        return Either.left(new RouteUnavailable({ message: `No rate card in force prices the route for '${request.model}'.`, retryable: false }))
      }
      const sizing: SizingRequest = {
        chain: chain.map((r) => ({ name: r.name, prices: prices.get(r.name)!.prices, routeLimit: r.max_output_tokens })),
        inputTokens,
        requested: request.requestedMaxTokens,
        maxCredits,
        maxCreditsParam,
        period: periodOf(now)
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
      Effect.flatMap(route(principal, request, maxCredits, maxCreditsParam, now, inputTokens), (r) => Effect.map(ledger.window(principal.projectId, r.sizing.period), (window): Quote => {
        const remaining = Math.max(0, window.cap - window.spent - window.reserved)
        const sized = sizeReservation(r.sizing, window.cap, remaining)
        return {
          chain: r.chain,
          prices: r.prices,
          inputTokens: r.inputTokens,
          period: r.sizing.period,
          cap: window.cap,
          remaining,
          decision: sized._tag === "Fits" ? sized : { _tag: "OverBudget", error: new BudgetExceeded({ message: sized.message, param: sized.param }) }
        }
      }))

    /** Everything up to and including the reservation. */
    const plan = (call: ChatCall, onReserved: (p: Plan) => void): Effect.Effect<Plan | GatewayReply, GovernanceError> =>
      // One reading of the Clock for the whole plan: rate check, idempotency, routing, pricing, hold.
      Effect.clockWith((clock) => {
        const now = clock.unsafeCurrentTimeMillis()
        const { principal, headers } = call
        const admitted = admitRequest(principal, call.body, call.maxCreditsHeader)
        if (Either.isLeft(admitted)) return Effect.fail(admitted.left)
        const { request, maxCredits, maxCreditsParam } = admitted.right
        const md = request.metadata
        // Two different keys for one call: which one the client meant is unknowable, so neither is guessed.
        if (md.idempotency_key !== undefined && call.idempotencyKeyHeader !== undefined && md.idempotency_key !== call.idempotencyKeyHeader) {
          return Effect.fail(
            new InvalidRequest({
              message: "The Idempotency-Key header and metadata.idempotency_key differ; send one key, or the same key in both.",
              param: "metadata.idempotency_key"
            })
          )
        }
        const rawKey = md.idempotency_key ?? call.idempotencyKeyHeader
        const checked = rawKey === undefined ? Either.right(undefined) : checkKey(rawKey, md.idempotency_key !== undefined ? "metadata.idempotency_key" : "Idempotency-Key")
        if (Either.isLeft(checked)) return Effect.fail(checked.left)
        const key = checked.right

        // The in-memory limiter answers synchronously (no Effect step on the hot path); a shared one
        // (Redis, or PostgreSQL) is one round trip.
        if (rateLimiter.mode === "local") {
          const verdict = rateLimiter.admitAt(principal.projectId, principal.rateLimit, now)
          if (Either.isLeft(verdict)) return Effect.fail(verdict.left)
          Object.assign(headers, rateLimitHeaders(verdict.right))
          return planAdmitted(call, onReserved, now, request, maxCredits, maxCreditsParam, key)
        }
        return Effect.flatMap(rateLimiter.admit(principal.projectId, principal.rateLimit), (verdict) => {
          Object.assign(headers, rateLimitHeaders(verdict))
          return planAdmitted(call, onReserved, now, request, maxCredits, maxCreditsParam, key)
        })
      })

    /** The rest of the plan, once the rate limit admitted the call. */
    const planAdmitted = (
      call: ChatCall,
      onReserved: (p: Plan) => void,
      now: number,
      request: ChatRequest,
      maxCredits: number | undefined,
      maxCreditsParam: string,
      key: string | undefined
    ): Effect.Effect<Plan | GatewayReply, GovernanceError> => {
        const { principal, headers, surface } = call
        const scope: TenantScope = { projectId: principal.projectId, environment: principal.environment }
        const fingerprint = key === undefined ? "" : fingerprintOf("POST", surface.path, call.clientBody ?? call.body)
        // Counted after the rate check, in bounded slices (src/services/Tokenizer.ts): a long prompt
        // never holds the event loop, and a limited caller gets no tokenizer time.
        return Effect.flatMap(countChatInput(request.messages, request.tools), (counted) => {
          const routed = route(principal, request, maxCredits, maxCreditsParam, now, counted)
          if (Either.isLeft(routed)) {
            // A replay (or a conflict, or an original in flight) answers even when the route is gone.
            if (key !== undefined) {
              const unroutable = routed.left
              return Effect.flatMap(idempotency.peekAt(scope, key, fingerprint, now), (seen) =>
                seen._tag === "Claimed"
                  ? Effect.fail(unroutable)
                  : Effect.flatMap(settleClaimOutcome(seen, scope, key, fingerprint, headers), (reply) =>
                      Option.isSome(reply) ? Effect.succeed<Plan | GatewayReply>(reply.value) : Effect.fail(unroutable)
                    )
              )
            }
            return Effect.fail(routed.left)
          }
          const { chain, prices, inputTokens, sizing } = routed.right
          const requestId = newRequestId(now)
          headers["x-request-id"] = requestId
          const hold = {
            reservationId: newReservationId(now),
            requestId,
            projectId: principal.projectId,
            period: sizing.period,
            deadline: now + settings.reservationTtlMs
          }
          const first = chain[0]!
          // One transaction (src/store/chatTransactions.ts): the claim — a replay, a conflict or an
          // original in flight answers first —, the output cap and hold sized on the budget window as
          // it is in that transaction, the pending request row and the hold.
          return store.reserve({
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
          }).pipe(
            span("tollgate.reserve", { attributes: { "tollgate.request_id": requestId, "tollgate.route": first.name } }),
            Effect.map((reserved): Plan | GatewayReply => {
              const p: Plan = {
                requestId,
                request,
                body: call.body as Record<string, unknown>,
                surface,
                chain,
                prices,
                inputTokens,
                outputCap: reserved.outputCap,
                hold: { ...hold, amount: reserved.reservation },
                idempotency: key === undefined ? undefined : { key, fingerprint },
                scope
              }
              onReserved(p)
              crashPoint("reserved")
              return p
            }),
            Effect.catchAll((refused): Effect.Effect<Plan | GatewayReply, GovernanceError> =>
              refused._tag === "OverBudget"
                ? Effect.fail(new BudgetExceeded({ message: refused.message, param: refused.param }))
                : settleClaimOutcome(refused.outcome, scope, key!, fingerprint, headers).pipe(
                    Effect.flatMap(Option.match({
                      // The original was released while we waited: run again as a fresh request.
                      onNone: () => plan(call, onReserved),
                      onSome: (reply) => Effect.succeed<Plan | GatewayReply>(reply)
                    }))
                  )
            )
          )
        })
    }

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

    /** Charge, receipt, request completion and idempotent result, in one transaction. */
    const settle = (
      p: Plan,
      principal: Principal,
      served: { readonly route: Route; readonly attempts: ReadonlyArray<Attempt> },
      tokens: TokenCounts,
      usageSource: "reported" | "counted",
      schemaOk: boolean,
      render: (g: Governance, now: number) => { readonly status: number; readonly contentType: string; readonly body: Uint8Array | string }
    ) =>
      Effect.clockWith((clock) => {
        const { prices, version } = p.prices.get(served.route.name)!
        const charge = settledCharge(tokens, prices, p.hold.amount)
        const verification = verificationOf({ route: true, schema: schemaOk, budget: chargeWithinReservation(tokens, prices, p.hold.amount) })
        const now = clock.unsafeCurrentTimeMillis()
        const receiptId = newReceiptId(now)
        const governance: Governance = {
          request_id: p.requestId,
          status: "completed",
          verification,
          credits_charged: charge,
          rate_card_version: version,
          receipt_id: receiptId
        }
        const rendered = render(governance, now)
        // Encoded once: the same bytes are stored for replay and sent.
        const body = typeof rendered.body === "string" ? utf8.encode(rendered.body) : rendered.body
        return store.settle({
          now,
          hold: p.hold,
          receiptId,
          organization: principal.organization,
          environment: principal.environment,
          model: p.request.model,
          route: served.route.name,
          rateCardVersion: version,
          tokens,
          usageSource,
          charge,
          verification,
          attempts: served.attempts,
          idempotent:
            p.idempotency === undefined
              ? undefined
              : { scope: p.scope, key: p.idempotency.key, ttlMs: settings.idempotencyTtlMs, result: { status: rendered.status, contentType: rendered.contentType, body } }
        }).pipe(
          span("tollgate.settle", { attributes: { "tollgate.request_id": p.requestId, "tollgate.credits_charged": charge, "tollgate.usage_source": usageSource } }),
          Effect.map(() => {
            crashPoint("settled")
            metrics.settled(principal.projectId, usageSource, charge)
            return { status: rendered.status, contentType: rendered.contentType, body }
          })
        )
      }).pipe(Effect.uninterruptible)

    const fromRouteFailure = (p: Plan, failed: RouteFailed) =>
      Effect.zipRight(
        abandon(p, failed.error._tag === "InvalidRequest" ? "invalid_request_error" : "route_unavailable", failed.error.message, failed.attempts),
        Effect.fail(failed.error)
      )

    const completeNonStreaming = (p: Plan, principal: Principal): Effect.Effect<GatewayReply, GovernanceError> =>
      Effect.suspend(() => {
        // Kept alive by `keepCallsAlive` until it settles or is abandoned.
        liveCalls.add(p)
        return Effect.ensuring(completeNonStreamingCall(p, principal), Effect.sync(() => liveCalls.delete(p)))
      })

    const completeNonStreamingCall = (p: Plan, principal: Principal): Effect.Effect<GatewayReply, GovernanceError> =>
      router.complete(p.chain, () => upstreamBody(p.body, p.request, p.outputCap)).pipe(
        span("tollgate.upstream", { kind: "client", attributes: { "tollgate.request_id": p.requestId } }),
        Effect.onInterrupt(() => abandon(p, "interrupted", "The gateway shut down before the upstream answered.", [])),
        Effect.tapDefect(() => abandon(p, "internal_error", "The gateway failed while calling the upstream; nothing was charged.", [])),
        Effect.catchAll((failed) => fromRouteFailure(p, failed)),
        Effect.flatMap((served) => {
          const json = served.value.json
          const choices = json.choices
          const schemaOk = Array.isArray(choices) && choices.length > 0 && choices.every((c) => c !== null && typeof c === "object" && "message" in c)
          const usage = json.usage as Parameters<typeof tokensFromUsage>[0] | null | undefined
          const reported = usage !== null && typeof usage === "object" && typeof usage.prompt_tokens === "number"
          const tokens: TokenCounts = reported
            ? tokensFromUsage(usage)
            : {
                input: p.inputTokens,
                cached_input: 0,
                output: Array.isArray(choices) ? choices.reduce((n: number, c: { message?: unknown }) => n + countText(deliveredText(c?.message)), 0) : 0,
                reasoning: 0
              }
          return Effect.map(
            settle(p, principal, served, tokens, reported ? "reported" : "counted", schemaOk, (g, now) => ({
              status: 200,
              contentType: "application/json",
              body: p.surface.renderBody(served.value.raw, json, g, tokens, now)
            })),
            (rendered): GatewayReply => ({ _tag: "Body", ...rendered })
          )
        })
      )

    /**
     * Stream: chunks are forwarded as they arrive; the surface decides what the client sees and puts
     * the governance on the last event once the charge settles. A stream cut by the upstream or by
     * the client is charged for what was delivered (counted), never zero once a token went out; a
     * failure before any token charges nothing.
     */
    const completeStreaming = (p: Plan, principal: Principal): Effect.Effect<GatewayReply, GovernanceError> =>
      Effect.gen(function* () {
        const connection = yield* Scope.make()
        const served = yield* router.openStream(p.chain, () => upstreamBody(p.body, p.request, p.outputCap)).pipe(
          span("tollgate.upstream_open", { kind: "client", attributes: { "tollgate.request_id": p.requestId } }),
          Scope.extend(connection),
          Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : Scope.close(connection, Exit.void))),
          Effect.tapDefect(() => abandon(p, "internal_error", "The gateway failed while calling the upstream; nothing was charged.", [])),
          Effect.catchAll((failed) => fromRouteFailure(p, failed))
        )
        // Kept alive by `keepCallsAlive`, and its progress marked by the heartbeat, until its connection closes.
        liveCalls.add(p)
        yield* Scope.addFinalizer(connection, Effect.sync(() => (liveCalls.delete(p), streamMarks.delete(p))))
        const renderer = p.surface.streamRenderer({ includeUsage: p.request.includeUsage, requestId: p.requestId, nowMs: yield* Clock.currentTimeMillis })
        // Every frame sent, kept only when an idempotency key will store the stream for replay.
        const keep = p.idempotency !== undefined
        const sent: Array<Uint8Array> = []
        const record = (frames: ReadonlyArray<Uint8Array>): ReadonlyArray<Uint8Array> => {
          if (keep) for (const f of frames) sent.push(f)
          return frames
        }
        let delivered = ""
        let usage: Parameters<typeof tokensFromUsage>[0] | undefined
        let schemaOk = true
        let settled = false
        const rateCardVersion = p.prices.get(served.route.name)!.version
        let markedLength = 0
        streamMarks.set(p, () => {
          if (settled || delivered.length === markedLength) return undefined
          markedLength = delivered.length
          // Uncached: a stream's prefix never repeats, and caching one per beat would push out the prompts the cache is for.
          const tokens: TokenCounts = { input: p.inputTokens, cached_input: 0, output: countBounded(delivered), reasoning: 0 }
          return { route: served.route.name, rateCardVersion, tokens, at: 0 }
        })

        const onEvent = (data: string): ReadonlyArray<Uint8Array> => {
          let json: Record<string, unknown> | undefined
          try {
            const parsed: unknown = JSON.parse(data)
            json = parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : undefined
          } catch {
            json = undefined
          }
          if (json === undefined) {
            schemaOk = false
          } else {
            if (json.usage !== null && typeof json.usage === "object") usage = json.usage as typeof usage
            if (Array.isArray(json.choices)) for (const c of json.choices as ReadonlyArray<{ delta?: unknown }>) delivered += deliveredText(c?.delta)
          }
          return record(renderer.onChunk(data, json))
        }

        const concat = (frames: ReadonlyArray<Uint8Array>): Uint8Array => {
          let length = 0
          for (const f of frames) length += f.byteLength
          const out = new Uint8Array(length)
          let at = 0
          for (const f of frames) {
            out.set(f, at)
            at += f.byteLength
          }
          return out
        }

        /** Settle once, however the stream ends. */
        const finish = (how: "complete" | "cut" | "disconnect", failure?: UpstreamFailure): Effect.Effect<ReadonlyArray<Uint8Array>> =>
          Effect.suspend(() => {
            if (settled) return Effect.succeed([])
            settled = true
            const reported = how === "complete" && usage !== undefined && typeof usage.prompt_tokens === "number"
            const tokens: TokenCounts = reported ? tokensFromUsage(usage!) : { input: p.inputTokens, cached_input: 0, output: countBounded(delivered), reasoning: 0 }
            if (delivered.length === 0 && how !== "complete") {
              const message = failure?.message ?? "the client disconnected before any token was delivered"
              return Effect.as(
                abandon(p, how === "cut" ? "route_unavailable" : "client_disconnected", message, served.attempts),
                renderer.broken(`The upstream stream failed before any token: ${message}. Nothing was charged.`, undefined)
              )
            }
            let tail: ReadonlyArray<Uint8Array> = []
            return Effect.map(
              settle(p, principal, served, tokens, reported ? "reported" : "counted", schemaOk && how === "complete", (g) => {
                tail =
                  how === "complete"
                    ? renderer.complete(g, tokens)
                    : renderer.broken(`The upstream stream broke: ${failure?.message ?? "client disconnected"}. Delivered tokens were charged.`, g)
                return { status: 200, contentType: "text/event-stream", body: keep ? concat([...sent, ...tail]) : new Uint8Array() }
              }),
              () => tail
            )
          })

        // The per-event path is plain JavaScript over an async iterable: an Effect Stream would cost
        // ≈ 50–100 µs of CPU per element pulled (bench/README.md). Effects run only to settle.
        const run = Runtime.runPromise(yield* Effect.runtime<never>())
        const close = () => run(Effect.zipRight(finish("disconnect"), Scope.close(connection, Exit.void)))
        let started = false
        let cancelled = false
        const cancel = () => {
          if (cancelled) return
          cancelled = true
          // Never iterated: settle here. Iterating: closing the connection ends the upstream read
          // below, which then settles as a disconnect.
          void (started ? run(Scope.close(connection, Exit.void)) : close())
        }
        // Shutdown past its grace ends the stream as an upstream cut does: the client gets the broken
        // stream's last event, with the charge for what it was delivered (nothing delivered: voided).
        let stopping = false
        const stop = () => {
          if (cancelled || stopping) return
          if (!started) return cancel()
          stopping = true
          void run(Scope.close(connection, Exit.void))
        }
        streamCancels.set(p, stop)
        yield* Scope.addFinalizer(connection, Effect.sync(() => streamCancels.delete(p)))
        const frames: AsyncIterable<Uint8Array> = {
          async *[Symbol.asyncIterator]() {
            started = true
            try {
              let ended: "complete" | "cut" = "complete"
              let failure: UpstreamFailure | undefined
              try {
                for await (const batch of served.value) {
                  if (cancelled) break
                  const out: Array<Uint8Array> = []
                  for (const data of batch) for (const frame of onEvent(data)) out.push(frame)
                  if (out.length > 0) yield concat(out)
                }
              } catch (e) {
                ended = "cut"
                failure = e instanceof UpstreamFailure ? e : undefined
              }
              if (stopping) {
                ended = "cut"
                failure = new UpstreamFailure({ reason: "protocol", message: "the gateway is shutting down", retryable: true })
              }
              const tail = await run(finish(cancelled ? "disconnect" : ended, failure))
              if (tail.length > 0 && !cancelled) yield concat(tail)
            } finally {
              // However the iteration stops (the client went away, the consumer returned): settle once.
              await close()
            }
          }
        }
        return { _tag: "Sse", frames, cancel } satisfies GatewayReply
      })

    /** Run one governed call on the given surface. */
    const handle = (call: ChatCall): Effect.Effect<GatewayReply, GovernanceError> =>
      Effect.suspend(() => {
        // The hold this call made, if any: interrupted (shutdown) between its reservation and the
        // step that settles or voids it — a stream still opening, a call not yet upstream — it is
        // voided here. Every write of `abandon` is guarded, so voiding a call already resolved is a no-op.
        let reserved: Plan | undefined
        return handlePlanned(call, (p) => (reserved = p)).pipe(
          Effect.onInterrupt(() => (reserved === undefined ? Effect.void : abandon(reserved, "interrupted", "The gateway shut down before the upstream answered.", []))),
          // The governed call's trace (exported only when an OTLP endpoint is configured: src/server.ts).
          // Ids only: never a key, a secret or a prompt.
          span("tollgate.governed_call", {
            kind: "server",
            attributes: { "tollgate.endpoint": call.surface.path, "tollgate.project_id": call.principal.projectId, "tollgate.environment": call.principal.environment }
          })
        )
      })

    const handlePlanned = (call: ChatCall, onReserved: (p: Plan) => void): Effect.Effect<GatewayReply, GovernanceError> =>
      Effect.flatMap(plan(call, onReserved), (planned) => {
        if ("_tag" in planned) return Effect.succeed(planned)
        if (planned.request.stream) return completeStreaming(planned, call.principal)
        // Upstream + settlement run in a service-owned fiber: a client hang-up must not strand the hold.
        // The caller's own, when the service adopted it; otherwise one forked for the purpose.
        return Effect.withFiberRuntime<GatewayReply, GovernanceError>((fiber) =>
          adopted.has(fiber)
            ? completeNonStreaming(planned, call.principal)
            : Effect.flatMap(FiberSet.run(inflight, completeNonStreaming(planned, call.principal)), Fiber.join)
        )
      })

    /**
     * Take ownership of a caller's fiber (the fast path's): shutdown interrupts it with the service's
     * other upstream calls (its hold is then voided), nothing else may, and `handle` running in it
     * calls the upstream without forking.
     */
    const adopt = (fiber: Fiber.RuntimeFiber<unknown, unknown>): void => {
      adopted.add(fiber)
      FiberSet.unsafeAdd(inflight, fiber)
    }

    /**
     * POST /v1/routing/evaluate: what a call would do — route, rate card, estimated and worst-case
     * Credits, whether the budget and rate checks would pass — executing, reserving and charging nothing.
     */
    const evaluate = (
      principal: Principal,
      body: unknown,
      maxCreditsHeader: string | undefined,
      headers: ReplyHeaders
    ): Effect.Effect<Evaluation, InvalidApiKey | InvalidRequest | UnsupportedWorkflow | RouteUnavailable | RateLimited> =>
      Effect.gen(function* () {
        const { request, maxCredits, maxCreditsParam } = yield* admitRequest(principal, body, maxCreditsHeader)
        const now = yield* Clock.currentTimeMillis
        // An evaluation is counted against the project's rate limit like the call it previews: it
        // costs the gateway the same parsing and tokenizing, and must not be a free way to spend CPU.
        const verdict = yield* (rateLimiter.mode === "local" ? rateLimiter.admitAt(principal.projectId, principal.rateLimit, now) : rateLimiter.admit(principal.projectId, principal.rateLimit))
        Object.assign(headers, rateLimitHeaders(verdict))
        const inputTokens = yield* countChatInput(request.messages, request.tools)
        const q = yield* quote(principal, request, maxCredits, maxCreditsParam, now, inputTokens)
        // Would the call it previews, sent next, pass the rate check?
        const rateOk = yield* rateLimiter.peek(principal.projectId, principal.rateLimit)
        const route = q.chain[0]!
        const priced = q.prices.get(route.name)!
        const inputCredits = chargeFor({ input: q.inputTokens, cached_input: 0, output: 0, reasoning: 0 }, priced.prices)
        return {
          object: "routing.evaluation",
          model: request.model,
          route: route.name,
          candidates: q.chain.map((r) => r.name),
          upstream_model: route.upstream_model,
          rate_card_version: priced.version,
          estimated_input_tokens: q.inputTokens,
          output_cap: q.decision._tag === "Fits" ? q.decision.outputCap : null,
          estimated_credits: {
            input: inputCredits,
            worst_case: q.decision._tag === "Fits" ? q.decision.reservation : null
          },
          budget: {
            would_pass: q.decision._tag === "Fits",
            period: q.period,
            budget_credits: q.cap,
            remaining: q.remaining,
            reason: q.decision._tag === "OverBudget" ? q.decision.error.message : null
          },
          rate_limit: { would_pass: rateOk, requests_per_minute: principal.rateLimit.requestsPerMinute, burst: principal.rateLimit.burst },
          executed: false
        } satisfies Evaluation
      })

    /** Governed calls running now: upstream calls the service owns, and open streams. */
    const inFlight = Effect.map(FiberSet.size(inflight), (n) => n + streamCancels.size)

    /**
     * Shutdown past its grace (src/server.ts): end every call still in flight now. A non-streamed
     * call is interrupted and its hold voided (a settlement already under way completes first); an
     * open stream ends as a client hang-up does, charged for what it delivered. Waits (bounded) for
     * their settlements.
     */
    const stopCalls = Effect.gen(function* () {
      for (const cancel of Array.from(streamCancels.values())) cancel()
      yield* FiberSet.clear(inflight)
      for (let i = 0; i < 200 && liveCalls.size > 0; i++) yield* Effect.sleep(Duration.millis(10))
    })

    return { handle, adopt, evaluate, inFlight, stopCalls } as const
  })
}) {}

export interface Evaluation {
  readonly object: "routing.evaluation"
  readonly model: string
  readonly route: string
  readonly candidates: ReadonlyArray<string>
  readonly upstream_model: string
  readonly rate_card_version: string
  readonly estimated_input_tokens: number
  readonly output_cap: number | null
  readonly estimated_credits: { readonly input: number; readonly worst_case: number | null }
  readonly budget: { readonly would_pass: boolean; readonly period: string; readonly budget_credits: number; readonly remaining: number; readonly reason: string | null }
  readonly rate_limit: { readonly would_pass: boolean; readonly requests_per_minute: number; readonly burst: number }
  readonly executed: false
}
