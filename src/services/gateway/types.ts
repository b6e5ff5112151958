/**
 * What the governed call's parts share (src/services/Gateway.ts assembles them): the reply, the call,
 * a call's plan once reserved, and the services and bookkeeping each part reads.
 */
import type { Effect, Exit } from "effect"
import type { Prices } from "../../../spec/pricing.ts"
import type { ChatRequest } from "../../domain/chat.ts"
import type { GatewaySettings } from "../../domain/config.ts"
import type { BudgetExceeded, GovernanceError } from "../../domain/errors.ts"
import type { ChatStoreApi } from "../../store/ChatStore.ts"
import type { ProgressMark } from "../../store/epochs.ts"
import type { Abortable } from "../../providers/Provider.ts"
import type { SizingRequest } from "../../domain/budgetSizing.ts"
import type { IdempotencyStore, Scope as TenantScope } from "../IdempotencyStore.ts"
import type { Instance } from "../Instance.ts"
import type { Principal } from "../KeyRegistry.ts"
import type { Hold, Ledger } from "../Ledger.ts"
import type { Metrics } from "../Metrics.ts"
import type { Pricing } from "../Pricing.ts"
import type { RateLimiterApi } from "../RateLimiter.ts"
import type { Route, Router } from "../Router.ts"
import type { Surface } from "../surfaces/Surface.ts"

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
  /** The answer is, or will be, handed to the call's `deliver` (ChatCall.deliver): nothing more to answer. */
  | { readonly _tag: "Delivered" }

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
   * Where the call's answer may be sent apart from the call's effect: a stream's reply the moment its
   * upstream opened, before the effect ends (src/services/gateway/streaming.ts); a non-streamed
   * call's reply, or its failure, once its settlement is written, after the effect ended with
   * `Delivered` (the leg held by callbacks, src/services/gateway/settlement.ts). Once it was given an
   * answer, the caller answers with it and leaves the effect's own end aside. Called at most once;
   * must not throw.
   */
  readonly deliver?: ((answer: Exit.Exit<GatewayReply, GovernanceError>) => void) | undefined
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

/** The services a governed call uses, and the service's bookkeeping of the calls in flight. */
export interface GatewayContext {
  readonly settings: GatewaySettings
  readonly span: SpanOf
  /** Spans are exported (OTEL_EXPORTER_OTLP_ENDPOINT): the governed call's span then lasts until its answer. */
  readonly traced: boolean
  readonly store: ChatStoreApi
  readonly rateLimiter: RateLimiterApi
  readonly idempotency: IdempotencyStore
  readonly router: Router
  readonly pricing: Pricing
  readonly ledger: Ledger
  readonly metrics: Metrics
  readonly instance: Instance
  /** Calls whose hold and claim the keep-alive pushes ahead, for their lifetime. */
  readonly liveCalls: Set<Plan>
  /** How to stop each non-streamed call's upstream leg (shutdown past its grace), until it is settled or voided. */
  readonly legs: Map<Plan, Abortable>
  /** Each open stream's progress mark, written by the heartbeat. */
  readonly streamMarks: Map<Plan, () => ProgressMark | undefined>
  /** How to end each open stream (shutdown past its grace). */
  readonly streamCancels: Map<Plan, () => void>
  /**
   * Streams delivered from their upstream's callback (ChatCall.deliver): their hold is settled by the
   * stream however the call's fiber ends, so an interruption of that fiber never voids it.
   */
  readonly delivering: WeakSet<Plan>
}
