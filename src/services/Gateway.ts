/**
 * The governed call (DESIGN.md §3), in this order:
 *   authenticate (done by the caller) → validate workflow → rate check → idempotency claim → route →
 *   price estimate → budget reservation → upstream call (retries / fallback) →
 *   settle (charge, receipt, idempotent result in ONE transaction) → respond.
 *
 * A 401/422/429 touches neither budget nor idempotency state. The claim, the pending request row
 * and the reservation are written in one transaction; so are the charge, the receipt, the request's
 * completion and the stored idempotent result. A failure that charged nothing voids the hold and
 * frees the idempotency key in one transaction.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Exit, Fiber, FiberSet, Option, Scope, Stream } from "effect"
import { chargeFor, chargeWithinReservation, decideOutputCap, type Prices, type TokenCounts, tokensFromUsage, worstCase } from "../../spec/pricing.ts"
import { type ChatRequest, parseChatRequest, parseMaxCredits, upstreamBody } from "../domain/chat.ts"
import { Settings } from "../domain/config.ts"
import { BudgetExceeded, type GovernanceError, IdempotencyConflict, InvalidApiKey, RouteUnavailable } from "../domain/errors.ts"
import { newRequestId, newReceiptId, newReservationId } from "../domain/ids.ts"
import type { UpstreamFailure } from "../providers/Provider.ts"
import { checkKey, type ClaimOutcome, fingerprintOf, IdempotencyStore, type Scope as TenantScope, type StoredResult } from "./IdempotencyStore.ts"
import type { Principal } from "./KeyRegistry.ts"
import { type Hold, Ledger, periodOf } from "./Ledger.ts"
import { Pricing } from "./Pricing.ts"
import { RateLimiter, rateLimitHeaders } from "./RateLimiter.ts"
import { type Attempt, Requests, type Verification } from "./Requests.ts"
import { type Route, RouteFailed, Router } from "./Router.ts"
import { countChat, countText } from "./Tokenizer.ts"

export type GatewayReply =
  | { readonly _tag: "Body"; readonly status: number; readonly contentType: string; readonly body: Uint8Array | string }
  | { readonly _tag: "Sse"; readonly stream: Stream.Stream<Uint8Array> }

/** Headers gathered along the pipeline (rate limit, request id, replay flag), sent with success or error. */
export type ReplyHeaders = Record<string, string>

export interface ChatCall {
  readonly principal: Principal
  readonly body: unknown
  readonly path: string
  readonly idempotencyKeyHeader: string | undefined
  readonly maxCreditsHeader: string | undefined
  /** Filled as the pipeline proceeds. */
  readonly headers: ReplyHeaders
}

export interface Governance {
  readonly request_id: string
  readonly status: "completed"
  readonly verification: Verification
  readonly credits_charged: number
  readonly rate_card_version: string
  readonly receipt_id: string
}

const CHECKS = ["route", "schema", "budget"] as const

const verificationOf = (passed: Record<(typeof CHECKS)[number], boolean>): Verification => {
  const failed = CHECKS.filter((c) => !passed[c])
  return { state: failed.length === 0 ? "verified" : "unverified", checks: [...CHECKS], failed_checks: failed }
}

/** Add `"governance": {...}` as the last member of a JSON object text, without re-encoding the rest. */
export const withGovernance = (rawObject: string, governance: Governance): string => {
  const end = rawObject.lastIndexOf("}")
  const head = rawObject.slice(0, end).trimEnd()
  const sep = head.endsWith("{") ? "" : ","
  return `${head}${sep}"governance":${JSON.stringify(governance)}}`
}

const encoder = new TextEncoder()
const sseFrame = (data: string): Uint8Array => encoder.encode(`data: ${data}\n\n`)
const DONE = encoder.encode("data: [DONE]\n\n")

/** Text the client received in a chat completion (message or delta): content, refusal, tool call arguments. */
const deliveredText = (m: unknown): string => {
  if (m === null || typeof m !== "object") return ""
  const o = m as { content?: unknown; refusal?: unknown; tool_calls?: unknown }
  let s = typeof o.content === "string" ? o.content : ""
  if (typeof o.refusal === "string") s += o.refusal
  if (Array.isArray(o.tool_calls)) {
    for (const t of o.tool_calls as ReadonlyArray<{ function?: { name?: unknown; arguments?: unknown } }>) {
      if (typeof t?.function?.name === "string") s += t.function.name
      if (typeof t?.function?.arguments === "string") s += t.function.arguments
    }
  }
  return s
}

interface Plan {
  readonly requestId: string
  readonly request: ChatRequest
  readonly body: Record<string, unknown>
  readonly chain: ReadonlyArray<Route>
  readonly prices: ReadonlyMap<string, { readonly prices: Prices; readonly version: string }>
  readonly inputTokens: number
  readonly outputCap: number
  readonly hold: Hold
  readonly idempotency: { readonly key: string; readonly fingerprint: string } | undefined
  readonly scope: TenantScope
}

class ClaimLost {
  readonly _tag = "ClaimLost"
  constructor(readonly outcome: ClaimOutcome) {}
}

export class Gateway extends Effect.Service<Gateway>()("tollgate/Gateway", {
  scoped: Effect.gen(function* () {
    const settings = yield* Settings
    const sql = yield* SqlClient.SqlClient
    const rateLimiter = yield* RateLimiter
    const idempotency = yield* IdempotencyStore
    const router = yield* Router
    const pricing = yield* Pricing
    const ledger = yield* Ledger
    const requests = yield* Requests
    // Upstream calls run in fibers owned by the service, so a client that hangs up does not abandon
    // a call whose charge must still be settled; shutdown interrupts them and their holds are voided.
    const inflight = yield* FiberSet.make<unknown, unknown>()

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

    /** Everything up to and including the reservation. */
    const plan = (call: ChatCall): Effect.Effect<Plan | GatewayReply, GovernanceError> =>
      Effect.gen(function* () {
        const { principal, headers } = call
        const request = yield* parseChatRequest(call.body)
        const body = call.body as Record<string, unknown>
        const md = request.metadata
        if (md.project_id !== undefined && md.project_id !== principal.projectId) {
          return yield* new InvalidApiKey({ message: "This API key is scoped to another project than metadata.project_id." })
        }
        if (md.environment !== undefined && md.environment !== principal.environment) {
          return yield* new InvalidApiKey({ message: "This API key is scoped to another environment than metadata.environment." })
        }
        const maxCredits =
          md.max_credits !== undefined
            ? yield* parseMaxCredits(md.max_credits, "metadata.max_credits")
            : yield* parseMaxCredits(call.maxCreditsHeader, "X-Max-Credits")
        const maxCreditsParam = md.max_credits !== undefined ? "metadata.max_credits" : "X-Max-Credits"
        const rawKey = md.idempotency_key ?? call.idempotencyKeyHeader
        const key = rawKey === undefined ? undefined : yield* checkKey(rawKey, md.idempotency_key !== undefined ? "metadata.idempotency_key" : "Idempotency-Key")

        const verdict = yield* rateLimiter.admit(principal.projectId, principal.rateLimit)
        Object.assign(headers, rateLimitHeaders(verdict))

        const scope: TenantScope = { projectId: principal.projectId, environment: principal.environment }
        const fingerprint = key === undefined ? "" : fingerprintOf("POST", call.path, call.body)
        if (key !== undefined) {
          const seen = yield* idempotency.peek(scope, key, fingerprint)
          if (seen._tag !== "Claimed") {
            const reply = yield* settleClaimOutcome(seen, scope, key, fingerprint, headers)
            if (Option.isSome(reply)) return reply.value
          }
        }

        const chain = yield* router.candidates(request.model)
        const now = yield* Clock.currentTimeMillis
        const prices = new Map<string, { prices: Prices; version: string }>()
        for (const route of chain) {
          const priced = pricing.priceAt(route.name, now)
          if (priced !== undefined) prices.set(route.name, { prices: priced.prices, version: priced.card.version })
        }
        const pricedChain = chain.filter((r) => prices.has(r.name))
        if (pricedChain.length === 0) {
          return yield* new RouteUnavailable({ message: `No rate card in force prices the route for '${request.model}'.`, retryable: false })
        }

        const inputTokens = countChat(request.messages, request.tools)
        const period = periodOf(now)
        const window = yield* ledger.window(principal.projectId, period)
        const remaining = Math.max(0, window.cap - window.spent - window.reserved)
        let outputCap = Infinity
        for (const route of pricedChain) {
          const decision = decideOutputCap({
            inputTokens,
            prices: prices.get(route.name)!.prices,
            routeLimit: route.max_output_tokens,
            requested: request.requestedMaxTokens,
            remainingBudget: remaining,
            maxCredits
          })
          if (decision._tag === "OverBudget") {
            return yield* decision.limitedBy === "max_credits"
              ? new BudgetExceeded({
                  message: `The worst-case cost of this request (${decision.worstCase} Credits) exceeds ${maxCreditsParam} (${maxCredits}). Lower max_tokens or raise the limit.`,
                  param: maxCreditsParam
                })
              : new BudgetExceeded({
                  message: `The worst-case cost of this request (${decision.worstCase} Credits) exceeds the project's remaining budget for ${period} (${remaining} of ${window.cap} Credits). Raise the budget cap, or wait for the next settlement window.`,
                  param: null
                })
          }
          outputCap = Math.min(outputCap, decision.outputCap)
        }
        let reservation = 0
        for (const route of pricedChain) {
          const p = prices.get(route.name)!.prices
          reservation = Math.max(reservation, worstCase(inputTokens, outputCap, p))
        }
        const requestId = newRequestId()
        headers["x-request-id"] = requestId
        const hold: Hold = {
          reservationId: newReservationId(),
          requestId,
          projectId: principal.projectId,
          period,
          amount: reservation,
          deadline: now + settings.reservationTtlMs
        }
        const planned: Plan = {
          requestId,
          request,
          body,
          chain: pricedChain,
          prices,
          inputTokens,
          outputCap,
          hold,
          idempotency: key === undefined ? undefined : { key, fingerprint },
          scope
        }
        const begun = yield* sql.withTransaction(
          Effect.gen(function* () {
            if (key !== undefined) {
              const claimed = yield* idempotency.claim(scope, key, fingerprint, requestId, hold.deadline)
              if (claimed._tag !== "Claimed") return yield* Effect.fail(new ClaimLost(claimed))
            }
            yield* requests.insertPending({
              id: requestId,
              projectId: principal.projectId,
              environment: principal.environment,
              keyId: principal.keyId,
              endpoint: call.path,
              model: request.model,
              route: pricedChain[0]!.name,
              stream: request.stream,
              idempotencyKey: key ?? null,
              rateCardVersion: prices.get(pricedChain[0]!.name)!.version,
              creditsReserved: reservation,
              createdAt: now
            })
            yield* ledger.reserve(hold)
          })
        ).pipe(
          Effect.as(planned),
          Effect.catchTag("SqlError", Effect.die),
          Effect.catchIf(
            (e): e is ClaimLost => e instanceof ClaimLost,
            (lost) =>
              settleClaimOutcome(lost.outcome, scope, key!, fingerprint, headers).pipe(
                Effect.flatMap(Option.match({
                  // The original was released while we waited: run again as a fresh request.
                  onNone: () => plan(call),
                  onSome: (reply) => Effect.succeed<Plan | GatewayReply>(reply)
                }))
              )
          )
        )
        return begun
      })

    /** Void the hold, fail the request and free the idempotency key: nothing was charged. */
    const abandon = (p: Plan, code: string, message: string, attempts: ReadonlyArray<Attempt>) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        yield* sql.withTransaction(
          Effect.gen(function* () {
            yield* ledger.release(p.hold.reservationId)
            yield* requests.fail(p.requestId, { code, message, attempts, completedAt: now })
            if (p.idempotency !== undefined) yield* idempotency.release(p.scope, p.idempotency.key, p.requestId)
          })
        ).pipe(Effect.orDie)
      }).pipe(Effect.uninterruptible)

    /** Charge, receipt, request completion and idempotent result, in one transaction. */
    const settle = (
      p: Plan,
      principal: Principal,
      served: { readonly route: Route; readonly attempts: ReadonlyArray<Attempt> },
      tokens: TokenCounts,
      usageSource: "reported" | "counted",
      schemaOk: boolean,
      render: (g: Governance) => { readonly status: number; readonly contentType: string; readonly body: Uint8Array | string }
    ) =>
      Effect.gen(function* () {
        const { prices, version } = p.prices.get(served.route.name)!
        const exact = chargeFor(tokens, prices)
        const charge = Math.min(exact, p.hold.amount)
        const verification = verificationOf({ route: true, schema: schemaOk, budget: chargeWithinReservation(tokens, prices, p.hold.amount) })
        const receiptId = newReceiptId()
        const governance: Governance = {
          request_id: p.requestId,
          status: "completed",
          verification,
          credits_charged: charge,
          rate_card_version: version,
          receipt_id: receiptId
        }
        const rendered = render(governance)
        const now = yield* Clock.currentTimeMillis
        yield* sql.withTransaction(
          Effect.gen(function* () {
            yield* ledger.settle({
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
              verification
            })
            yield* requests.complete(p.requestId, {
              route: served.route.name,
              creditsCharged: charge,
              receiptId,
              verification,
              attempts: served.attempts,
              completedAt: now
            })
            if (p.idempotency !== undefined) {
              const body = typeof rendered.body === "string" ? encoder.encode(rendered.body) : rendered.body
              yield* idempotency.finish(p.scope, p.idempotency.key, p.requestId, { status: rendered.status, contentType: rendered.contentType, body }, settings.idempotencyTtlMs)
            }
          })
        ).pipe(Effect.orDie)
        return rendered
      }).pipe(Effect.uninterruptible)

    const fromRouteFailure = (p: Plan, failed: RouteFailed) =>
      Effect.zipRight(
        abandon(p, failed.error._tag === "InvalidRequest" ? "invalid_request_error" : "route_unavailable", failed.error.message, failed.attempts),
        Effect.fail(failed.error)
      )

    const completeNonStreaming = (p: Plan, principal: Principal): Effect.Effect<GatewayReply, GovernanceError> =>
      Effect.gen(function* () {
        const served = yield* router.complete(p.chain, () => upstreamBody(p.body, p.request, p.outputCap)).pipe(
          Effect.onInterrupt(() => abandon(p, "interrupted", "The gateway shut down before the upstream answered.", [])),
          Effect.catchAll((failed) => fromRouteFailure(p, failed))
        )
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
        const rendered = yield* settle(p, principal, served, tokens, reported ? "reported" : "counted", schemaOk, (g) => ({
          status: 200,
          contentType: "application/json",
          body: withGovernance(served.value.raw, g)
        }))
        return { _tag: "Body", ...rendered } satisfies GatewayReply
      })

    /**
     * Stream: chunks are forwarded as they arrive. `governance` rides on the last chunk before
     * [DONE]: the usage chunk when the client asked for usage, otherwise the finish_reason chunk,
     * held back until the upstream ends and the charge settles. A stream cut by the upstream or by
     * the client is charged for what was delivered (counted), never zero once a token went out.
     */
    const completeStreaming = (p: Plan, principal: Principal): Effect.Effect<GatewayReply, GovernanceError> =>
      Effect.gen(function* () {
        const connection = yield* Scope.make()
        const served = yield* router.openStream(p.chain, () => upstreamBody(p.body, p.request, p.outputCap)).pipe(
          Scope.extend(connection),
          Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : Scope.close(connection, Exit.void))),
          Effect.catchAll((failed) => fromRouteFailure(p, failed))
        )
        const includeUsage = p.request.includeUsage
        const sent: Array<Uint8Array> = []
        let deliveredChars = ""
        let usage: Parameters<typeof tokensFromUsage>[0] | undefined
        let heldFinal: string | undefined
        let meta = { id: `chatcmpl-${p.requestId}`, created: 0, model: "" }
        let schemaOk = true
        let settled = false
        const emit = (frame: Uint8Array): Uint8Array => {
          sent.push(frame)
          return frame
        }
        const countedTokens = (): TokenCounts => ({ input: p.inputTokens, cached_input: 0, output: countText(deliveredChars), reasoning: 0 })

        const onEvent = (data: string): ReadonlyArray<Uint8Array> => {
          let json: Record<string, unknown>
          try {
            json = JSON.parse(data) as Record<string, unknown>
          } catch {
            schemaOk = false
            return [emit(sseFrame(data))]
          }
          if (typeof json.id === "string") meta = { id: json.id, created: Number(json.created ?? 0), model: String(json.model ?? "") }
          if (json.usage !== null && typeof json.usage === "object") {
            usage = json.usage as typeof usage
            const choices = json.choices
            if (!Array.isArray(choices) || choices.length === 0) {
              // The usage chunk: held for governance if the client wants usage, dropped otherwise.
              if (includeUsage) heldFinal = data
              return []
            }
          }
          const choices = Array.isArray(json.choices) ? (json.choices as ReadonlyArray<{ delta?: unknown; finish_reason?: unknown }>) : []
          for (const c of choices) deliveredChars += deliveredText(c?.delta)
          // Strip the per-chunk `"usage": null` we added upstream when the client did not ask for it.
          const out = !includeUsage && "usage" in json ? JSON.stringify({ ...json, usage: undefined }) : data
          if (!includeUsage && choices.some((c) => c?.finish_reason !== null && c?.finish_reason !== undefined)) {
            heldFinal = out
            return []
          }
          return [emit(sseFrame(out))]
        }

        const finalFrames = (g: Governance, tokens: TokenCounts): Array<Uint8Array> => {
          if (heldFinal !== undefined) return [sseFrame(withGovernance(heldFinal, g)), DONE]
          const synthetic: Record<string, unknown> = { id: meta.id, object: "chat.completion.chunk", created: meta.created, model: meta.model, choices: [] }
          if (includeUsage) {
            const completion = tokens.output + tokens.reasoning
            const prompt = tokens.input + tokens.cached_input
            synthetic.usage = { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion }
          }
          return [sseFrame(withGovernance(JSON.stringify(synthetic), g)), DONE]
        }

        const concat = (frames: ReadonlyArray<Uint8Array>): Uint8Array => Buffer.concat(frames.map((f) => Buffer.from(f.buffer, f.byteOffset, f.byteLength)))

        /** Settle once, however the stream ends. */
        const finish = (how: "complete" | "cut" | "disconnect", failure?: UpstreamFailure): Effect.Effect<ReadonlyArray<Uint8Array>> =>
          Effect.suspend(() => {
            if (settled) return Effect.succeed([])
            settled = true
            const reported = usage !== undefined && typeof usage.prompt_tokens === "number"
            const tokens = reported && how === "complete" ? tokensFromUsage(usage!) : countedTokens()
            const source = reported && how === "complete" ? "reported" : "counted"
            if (deliveredChars.length === 0 && how !== "complete") {
              const message = failure?.message ?? "The client disconnected before any token was delivered."
              return Effect.as(abandon(p, how === "cut" ? "route_unavailable" : "client_disconnected", message, served.attempts), [
                sseFrame(JSON.stringify({ error: { message: `The upstream stream failed before any token: ${message}`, type: "route_unavailable", code: "route_unavailable", param: null } }))
              ])
            }
            let tail: Array<Uint8Array> = []
            return Effect.map(
              settle(p, principal, served, tokens, source, schemaOk && how === "complete", (g) => {
                tail =
                  how === "complete"
                    ? finalFrames(g, tokens)
                    : [
                        sseFrame(
                          JSON.stringify({
                            error: { message: `The upstream stream broke: ${failure?.message ?? "client disconnected"}. Delivered tokens were charged.`, type: "route_unavailable", code: "route_unavailable", param: null },
                            governance: g
                          })
                        )
                      ]
                return { status: 200, contentType: "text/event-stream", body: concat([...sent, ...tail]) }
              }),
              () => tail
            )
          })

        const body = served.value.pipe(
          Stream.mapConcat(onEvent),
          Stream.concat(Stream.suspend(() => Stream.fromIterableEffect(finish("complete")))),
          Stream.catchAll((failure) => Stream.fromIterableEffect(finish("cut", failure))),
          Stream.ensuring(Effect.zipRight(finish("disconnect"), Scope.close(connection, Exit.void)))
        )
        return { _tag: "Sse", stream: body } satisfies GatewayReply
      })

    const chat = (call: ChatCall): Effect.Effect<GatewayReply, GovernanceError> =>
      Effect.gen(function* () {
        const planned = yield* plan(call)
        if ("_tag" in planned) return planned
        if (planned.request.stream) return yield* completeStreaming(planned, call.principal)
        // Run upstream + settlement in a service-owned fiber: a client hang-up must not strand the hold.
        const fiber = yield* FiberSet.run(inflight, completeNonStreaming(planned, call.principal))
        return yield* Fiber.join(fiber)
      })

    return { chat } as const
  })
}) {}
