/**
 * What every upstream adapter offers: an OpenAI-shaped chat completion, whole or streamed.
 * Adapters translate their provider's wire format to OpenAI's; the Gateway only speaks OpenAI.
 */
import { type Clock, Data, Effect, type Either, type Exit, Scope } from "effect"
import type { RouteConfig } from "../domain/config.ts"

export class UpstreamFailure extends Data.TaggedError("UpstreamFailure")<{
  readonly reason: "status" | "connect" | "timeout" | "protocol"
  readonly status?: number | undefined
  readonly message: string
  /** 429, 5xx, connect errors and timeouts: another attempt or route may succeed. */
  readonly retryable: boolean
}> {
  /** An upstream 4xx other than 429: caused by the client's own request, passed on as 400. */
  get isClientError(): boolean {
    return this.reason === "status" && this.status !== undefined && this.status >= 400 && this.status < 500 && this.status !== 429
  }
}

export interface UpstreamReply {
  /** The upstream's JSON body as received (OpenAI chat.completion shape). */
  readonly raw: string
  readonly json: Record<string, unknown>
}

/**
 * What stops a call held by callbacks (docs/decisions/0033): an object rather than a closure, since
 * it is the call's own state object wherever it can be (0034). A no-op once the call answered.
 */
export interface Abortable {
  abort(): void
}

/**
 * A non-streamed completion held by callbacks: `done` gets the reply or the failure once, after
 * `send` returned; the returned `abort` stops it (then `done` is never called). `clock` is the
 * caller's. A throw of `send` is a bug of ours (a body it cannot serialize), not the upstream's.
 */
export type Send = (
  route: RouteConfig,
  body: Record<string, unknown>,
  clock: Clock.Clock,
  done: (result: Either.Either<UpstreamReply, UpstreamFailure>) => void
) => Abortable

/**
 * A stream as it opened (Upstream.openThen): what its start read ahead to, and how to end it (the
 * reader is gone: its body is aborted if it is still open before its end).
 */
export interface Opened<A> {
  readonly value: A
  readonly stop: () => void
}

/**
 * A streaming completion opened by callbacks (docs/decisions/0039): the request is dispatched before
 * it returns, and `done` is told once how the opening ended — the stream, its failure, or a defect
 * (`opened` threw). `opened` is ChatProvider.stream's. Returns the abort: before `done`, the request
 * is aborted and `done` never told. `clock` is the caller's. A throw of `startStream` itself is a bug
 * of ours (a body it cannot serialize), not the upstream's.
 */
export type StartStream = (
  route: RouteConfig,
  body: Record<string, unknown>,
  clock: Clock.Clock,
  done: (outcome: Exit.Exit<Opened<DataEvents>, UpstreamFailure>) => void,
  opened?: (events: DataEvents) => boolean
) => Abortable

export interface ChatProvider {
  readonly type: string
  /** Non-streaming chat completion. */
  readonly complete: (route: RouteConfig, body: Record<string, unknown>) => Effect.Effect<UpstreamReply, UpstreamFailure>
  /**
   * The same completion held by callbacks rather than a fiber (the Router's hot path,
   * docs/decisions/0033); `complete` is then `completeBy(send)`. An adapter without it is run
   * through `complete`.
   */
  readonly send?: Send
  /**
   * Streaming chat completion. The effect connects and checks the status (a failure here is before
   * any token); the events then yield the `data:` payload of each SSE event as received, without
   * the final `[DONE]`. The connection lives as long as `Scope`.
   *
   * `opened`, when given, may be called once with the same events, synchronously, the moment the
   * stream opened (before the effect resumes the fiber that waits for it): a caller that can deliver
   * from there saves the fiber's resumption on the way to its first byte (docs/decisions/0031). It
   * answers whether it took the stream; if it did, the effect resumes a turn later, once what the
   * caller started from its callback ran. Never called for an attempt that was aborted or failed.
   * It must not throw.
   */
  readonly stream: (
    route: RouteConfig,
    body: Record<string, unknown>,
    opened?: (events: DataEvents) => boolean
  ) => Effect.Effect<DataEvents, UpstreamFailure, Scope.Scope>
  /**
   * The same stream opened by callbacks (the Router's first attempt, dispatched before the call's
   * fiber runs); `stream` is then `streamBy(startStream)`. An adapter without it is run through `stream`.
   */
  readonly startStream?: StartStream
}

/** `complete` as an effect of `send`: interrupting it aborts the request. */
export const completeBy =
  (send: Send): ChatProvider["complete"] =>
  (route, body) =>
    Effect.clockWith((clock) =>
      Effect.async<UpstreamReply, UpstreamFailure>((resume) => {
        const pending = send(route, body, clock, (result) => resume(result._tag === "Right" ? Effect.succeed(result.right) : Effect.fail(result.left)))
        return Effect.sync(() => pending.abort())
      })
    )

/**
 * A stream opening held by callbacks, as an effect: interrupting it aborts the opening; once open,
 * the stream lives as long as `Scope` (its `stop` is the scope's finalizer — Scope.addFinalizer, not
 * Effect.addFinalizer, which would diff the whole context twice at every close: docs/decisions/0038).
 */
export const openedIn = (
  register: (done: (outcome: Exit.Exit<Opened<DataEvents>, UpstreamFailure>) => void) => Abortable
): Effect.Effect<DataEvents, UpstreamFailure, Scope.Scope> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(
      restore(
        Effect.async<Opened<DataEvents>, UpstreamFailure>((resume) => {
          const opening = register(resume)
          return Effect.sync(() => opening.abort())
        })
      ),
      (o) => Effect.as(Effect.flatMap(Effect.scope, (scope) => Scope.addFinalizer(scope, Effect.sync(o.stop))), o.value)
    )
  )

/** `stream` as an effect of `startStream`. */
export const streamBy =
  (startStream: StartStream): ChatProvider["stream"] =>
  (route, body, opened) =>
    Effect.clockWith((clock) => openedIn((done) => startStream(route, body, clock, done, opened)))

/**
 * The `data:` payloads of a stream's SSE events, in batches as they arrive (one per network read).
 * Iterating throws an `UpstreamFailure` when the stream breaks. A plain async iterable rather than an
 * Effect Stream: the per-event path of a stream is the hot path, and an Effect Stream costs ≈ 50–100 µs
 * of CPU per element pulled (docs/decisions/0007).
 */
export type DataEvents = AsyncIterable<ReadonlyArray<string>>

export const statusFailure = (status: number, detail: string): UpstreamFailure =>
  new UpstreamFailure({
    reason: "status",
    status,
    message: `upstream answered ${status}${detail.length > 0 ? `: ${detail}` : ""}`,
    retryable: status === 429 || status >= 500
  })

/** The `error.message` of an OpenAI- or Anthropic-shaped error body, else a short prefix of it. */
export const upstreamErrorDetail = (text: string): string => {
  try {
    const parsed = JSON.parse(text) as { error?: { message?: unknown } }
    if (typeof parsed.error?.message === "string") return parsed.error.message
  } catch {
    // not JSON: fall through
  }
  return text.slice(0, 200)
}

/** A request that never got an HTTP answer (refused, reset, DNS): retryable. */
export const transportFailure = (cause: unknown, name: string): UpstreamFailure =>
  new UpstreamFailure({
    reason: "connect",
    message: `could not reach provider ${name}: ${cause instanceof Error ? cause.message : String(cause)}`,
    retryable: true
  })

/** The failure of an attempt that took longer than its timeout: retryable. */
export const timeoutFailure = (name: string, ms: number) => () =>
  new UpstreamFailure({ reason: "timeout", message: `provider ${name} did not answer within ${ms} ms`, retryable: true })
