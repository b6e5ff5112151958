/**
 * What the governed call's parts share (src/services/Gateway.ts assembles them): the reply, the call,
 * a call's plan once reserved, and the services and bookkeeping each part reads.
 */
import type { Effect, Exit } from "effect"
import type { Prices } from "../../../spec/pricing.ts"
import type { ChatRequest } from "../../domain/chat.ts"
import type { GatewaySettings } from "../../domain/config.ts"
import type { BudgetExceeded, GovernanceError } from "../../domain/errors.ts"
import type { ChatPort } from "../../store/ChatStore.ts"
import type { ScopeWindow, SizingRequest } from "../../domain/budgetSizing.ts"
import type { IdempotencyStore, Scope as TenantScope } from "../IdempotencyStore.ts"
import type { Events } from "../Events.ts"
import type { Instance } from "../Instance.ts"
import type { Principal } from "../KeyRegistry.ts"
import type { Hold, Ledger } from "../Ledger.ts"
import type { Metrics } from "../Metrics.ts"
import type { Pricing } from "../Pricing.ts"
import type { RateLimiterApi } from "../RateLimiter.ts"
import type { LimitsTaken } from "../UpstreamLimits.ts"
import type { Route, Router } from "../Router.ts"
import type { Surface } from "../surfaces/Surface.ts"
import type { InFlight } from "./inflight.ts"

/** A streamed reply. */
export interface SseReply {
  readonly _tag: "Sse"
  /** The frames to send, in order, a batch per upstream read. Stop when `cancel` was called. */
  readonly frames: AsyncIterable<Uint8Array>
  /** The client went away: stop reading the upstream; the Gateway settles for what was delivered. */
  readonly cancel: () => void
}

export type GatewayReply =
  | { readonly _tag: "Body"; readonly status: number; readonly contentType: string; readonly body: Uint8Array | string }
  | SseReply

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
  /**
   * Where the call's answer goes, once (src/services/gateway/inflight.ts): a stream's reply the moment
   * its upstream opened, a non-streamed call's reply once its settlement is written, or the failure.
   * Called from callbacks (the store's, the upstream's): must not throw.
   */
  readonly deliver: (answer: Exit.Exit<GatewayReply, GovernanceError>) => void
  /**
   * The tokens and slots the call took from its project's and key's upstream limits, once taken
   * (src/services/UpstreamLimits.ts); ended with the call (src/services/gateway/inflight.ts).
   */
  limitsTaken?: LimitsTaken | undefined
}
/** Where a request would go and what it would cost per token: routing and pricing, before any budget question. */
export interface Routed {
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
  /** Every scope the call would be held in, its project's first (spec/scopes.ts SCOPE_ORDER). */
  readonly scopes: ReadonlyArray<ScopeWindow>
  readonly decision:
    | { readonly _tag: "Fits"; readonly outputCap: number; readonly reservation: number }
    | { readonly _tag: "OverBudget"; readonly error: BudgetExceeded }
}

/** A call once its hold is reserved: everything the upstream call and the settlement need. */
export interface Plan {
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

/** A span of the governed call, or nothing when traces are not exported (src/services/Gateway.ts). */
export type SpanOf = (
  name: string,
  options: { readonly kind?: "server" | "client"; readonly attributes: Record<string, unknown> }
) => <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>

/** The services a governed call uses. The calls in flight are the Gateway's registry (./inflight.ts). */
export interface GatewayContext {
  readonly settings: GatewaySettings
  /** A span around an effect of the call's, or nothing when traces are not exported. */
  readonly span: SpanOf
  /** The store port, every transaction by callback (src/store/ChatStore.ts, `callbackPort`). */
  readonly store: ChatPort
  readonly rateLimiter: RateLimiterApi
  readonly idempotency: IdempotencyStore
  readonly router: Router
  readonly pricing: Pricing
  readonly ledger: Ledger
  readonly metrics: Metrics
  readonly instance: Instance
  /** The events outbox's budget.exhausted writer (absent where a test builds the Gateway without it). */
  readonly events: Pick<Events, "exhausted"> | undefined
  /**
   * Run an effect of the call's in a fiber the Gateway owns (shutdown interrupts it), under the
   * call's span when traced, and tell `k` how it ended.
   */
  readonly fork: <A, E>(f: InFlight, effect: Effect.Effect<A, E>, k: (exit: Exit.Exit<A, E>) => void) => void
}
