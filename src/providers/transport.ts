/**
 * The one upstream transport: a POST of a JSON payload to a provider on undici, shared by every HTTP
 * adapter (openai.ts, anthropic.ts). One keep-alive pool per provider; undici's own timeouts bound the
 * headers and the idle time between body chunks; one signal per attempt aborts it on interruption (a
 * client that hangs up) or when the provider's timeout passes; every failure is an UpstreamFailure.
 *
 * undici directly rather than Effect's HttpClient: on the hot path that measured ≈ 1.5 ms → well
 * under 1 ms of CPU per call on the bench box (docs/decisions/0019).
 */
import { Effect, Either, Scope } from "effect"
import { EventEmitter } from "node:events"
import { type Dispatcher, errors as undiciErrors, Pool } from "undici"
import { timeline } from "../domain/timeline.ts"
import { type Abortable, type DataEvents, statusFailure, timeoutFailure, transportFailure, UpstreamFailure, upstreamErrorDetail } from "./Provider.ts"
import { makeSseFeed, type SseFeed } from "./sse.ts"

export interface UpstreamOptions {
  /** The provider's name, for failure messages. */
  readonly name: string
  readonly url: string
  readonly timeoutMs: number
  /** Sent with every request (content-type, credentials, versions). Never logged. */
  readonly headers: Readonly<Record<string, string>>
  /** Extra headers of a streaming request (e.g. `accept: text/event-stream`). */
  readonly streamHeaders?: Readonly<Record<string, string>>
}

export interface Upstream {
  /** A protocol failure of this provider (`provider <name> <message>`), retryable. */
  readonly protocol: (message: string) => UpstreamFailure
  /** The failure of a body read that broke (a reset, an idle timeout). */
  readonly failureOf: (e: unknown) => UpstreamFailure
  /**
   * POST `payload` and read the whole body within the timeout: `done` gets its text, or a status
   * failure (carrying the upstream's error message) for a status ≥ 400, once, from undici's callbacks.
   * Held by those callbacks, not by a fiber: a call waiting for its upstream keeps no fiber's stack
   * alive (docs/decisions/0033). Returns its abort (a no-op once `done` was called); aborted,
   * `done` is never called.
   */
  readonly send: (payload: string, done: (result: Either.Either<string, UpstreamFailure>) => void) => Abortable
  /**
   * POST `payload` for an SSE body, read as its events' data (sse.ts `makeSseFeed`: up to `[DONE]`,
   * or up to the batch after which `ended()` turns true); `start` then reads ahead on them (e.g. up
   * to the first token) within the same deadline and signal. A status ≥ 400 is a status failure. The
   * body lives until `Scope` closes, which aborts it if it is still open before its end.
   * `opened` gets what `start` answered at once, in the callback that has it, unless the attempt
   * was aborted by then; when it takes the stream, the effect resumes at the loop's next check phase
   * (a `setImmediate`, before any timer), after the microtasks it started — its first write — ran
   * (ChatProvider.stream). If it throws, the opening dies with that defect and the request is released.
   */
  readonly open: <A>(
    payload: string,
    start: (events: DataEvents) => Promise<A>,
    ended?: () => boolean,
    opened?: (value: A) => boolean
  ) => Effect.Effect<A, UpstreamFailure, Scope.Scope>
}

/**
 * What aborts one attempt. undici takes an EventEmitter as a request's signal as well as an
 * AbortSignal (it listens for 'abort' and reads `aborted`); one is ≈ 35× cheaper to make than an
 * AbortController with its signal (0.13 vs 4.6 µs, and an attempt is made per governed call).
 */
class AttemptSignal extends EventEmitter {
  aborted = false
  abort(): void {
    if (this.aborted) return
    this.aborted = true
    this.emit("abort")
  }
}

/** A throw of a caller's `opened` callback: a bug of ours, so the attempt dies with it (never the upstream's failure). */
class CallerDefect {
  constructor(readonly defect: unknown) {}
}

/** A body's chunks as text (one chunk, the usual case, without a copy). */
const textOf = (chunks: ReadonlyArray<Buffer>): string => (chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks).toString("utf8"))

/**
 * A status ≥ 400 as a failure, with the upstream's error message read from its body; a body that
 * broke is still that status, its detail then empty.
 */
const refused = (status: number, body: ReadonlyArray<Buffer> | "broken"): UpstreamFailure =>
  statusFailure(status, body === "broken" ? "" : upstreamErrorDetail(textOf(body)))

/**
 * One whole completion in flight (`Upstream.send`): undici's dispatch handler, the provider's timeout
 * and the caller's abort in one object. It lives through the upstream's wait, and every scavenge
 * meanwhile copies what it holds, so it is one object with methods rather than a signal, a timer
 * closure and a closure per callback (docs/decisions/0034). `done` is told once; after an abort, never.
 * Aborted before undici started the request, it is aborted the moment undici does.
 */
class Completion implements Dispatcher.DispatchHandler, Abortable {
  private readonly chunks: Array<Buffer> = []
  private status = 0
  private over = false
  private controller: Dispatcher.DispatchController | undefined = undefined
  private readonly timer: NodeJS.Timeout

  constructor(
    private readonly done: (result: Either.Either<string, UpstreamFailure>) => void,
    private readonly failureOf: (e: unknown) => UpstreamFailure,
    private readonly timedOut: () => UpstreamFailure,
    timeoutMs: number
  ) {
    this.timer = setTimeout(timeUp, timeoutMs, this)
  }

  /** Tell `done` once, and stop the timer. */
  finish(result: Either.Either<string, UpstreamFailure>): void {
    if (this.over) return
    this.over = true
    clearTimeout(this.timer)
    this.done(result)
  }

  /** The timeout is the answer: the abort's own error, which undici may report at once, comes too late. */
  timeUp(): void {
    this.finish(Either.left(this.timedOut()))
    this.controller?.abort(new undiciErrors.RequestAbortedError())
  }

  abort(): void {
    if (this.over) return
    this.over = true
    clearTimeout(this.timer)
    this.controller?.abort(new undiciErrors.RequestAbortedError())
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller
    if (this.over) controller.abort(new undiciErrors.RequestAbortedError())
  }

  onResponseStart(_: Dispatcher.DispatchController, statusCode: number): void {
    timeline.mark("upstream: headers received")
    this.status = statusCode
  }

  onResponseData(_: Dispatcher.DispatchController, chunk: Buffer): void {
    this.chunks.push(chunk)
  }

  onResponseEnd(): void {
    timeline.mark("upstream: body read")
    this.finish(this.status >= 400 ? Either.left(refused(this.status, this.chunks)) : Either.right(textOf(this.chunks)))
  }

  onResponseError(_: Dispatcher.DispatchController, e: Error): void {
    this.finish(Either.left(this.status >= 400 ? refused(this.status, "broken") : this.failureOf(e)))
  }
}

/** A `Completion`'s timer: one function for all of them, the completion passed as its argument. */
const timeUp = (completion: Completion): void => completion.timeUp()

export const makeUpstream = (options: UpstreamOptions): Upstream => {
  const { name, url, timeoutMs } = options
  // One origin per provider: its Pool directly, the path parsed once. `request(url, { dispatcher })`
  // through an Agent parsed the URL and looked the origin's pool up on every call.
  const target = new URL(url)
  const path = `${target.pathname}${target.search}`
  const pool = new Pool(target.origin, { connections: 512, keepAliveTimeout: 30_000, headersTimeout: timeoutMs, bodyTimeout: timeoutMs })
  const timedOut = timeoutFailure(name, timeoutMs)
  const streamHeaders = { ...options.headers, ...options.streamHeaders }

  const failureOf = (e: unknown): UpstreamFailure =>
    e instanceof UpstreamFailure
      ? e
      : e instanceof undiciErrors.HeadersTimeoutError || e instanceof undiciErrors.BodyTimeoutError
        ? timedOut()
        : transportFailure(e, name)

  /**
   * Run `work` with ONE signal that aborts on interruption or after `timeoutMs`, as an Effect: a
   * whole completion must finish within it; a stream only has to start (its body is then bounded by
   * the idle `bodyTimeout`). undici's own headersTimeout is coarse (its timers tick at ≈ 1 s).
   * Effect.async rather than tryPromise: tryPromise's signal would be an AbortController per call.
   */
  const attempt = <A>(work: (signal: AttemptSignal) => Promise<A>): Effect.Effect<A, UpstreamFailure> =>
    Effect.async<A, UpstreamFailure>((resume) => {
      const signal = new AttemptSignal()
      let timedOutNow = false
      const timer = setTimeout(() => {
        timedOutNow = true
        signal.abort()
      }, timeoutMs)
      // A synchronous throw of `work` is a bug of ours, not an upstream failure: it is a defect (it
      // escapes Effect.async), which never counts against the route's breaker (src/services/Router.ts).
      work(signal).then(
        (a) => {
          clearTimeout(timer)
          resume(Effect.succeed(a))
        },
        (e: unknown) => {
          clearTimeout(timer)
          resume(e instanceof CallerDefect ? Effect.die(e.defect) : Effect.fail(timedOutNow ? timedOut() : failureOf(e)))
        }
      )
      return Effect.sync(() => {
        clearTimeout(timer)
        signal.abort()
      })
    })

  /** A handler's start wired to the attempt's signal: the request is aborted whether the signal fires before or after undici starts it. */
  const abortedBy = (signal: AttemptSignal) => {
    let controller: Dispatcher.DispatchController | undefined
    signal.once("abort", () => controller?.abort(new undiciErrors.RequestAbortedError()))
    return (c: Dispatcher.DispatchController): void => {
      controller = c
      if (signal.aborted) c.abort(new undiciErrors.RequestAbortedError())
    }
  }

  /**
   * A whole completion is gathered by a dispatch handler rather than request() + body.text(): that
   * wraps every answer in a Readable stream and reads it through events, a nextTick and a chain of
   * promises (≈ 7 µs CPU a call in a loopback microbench, more on a cold call; docs/decisions/0026).
   * The handler is one `Completion`, which is also its timeout and its abort (0034).
   */
  const send: Upstream["send"] = (payload, done) => {
    const completion = new Completion(done, failureOf, timedOut, timeoutMs)
    timeline.mark("upstream: attempt set up (signal, timer)")
    try {
      pool.dispatch({ method: "POST", path, headers: options.headers, body: payload }, completion)
    } catch (e) {
      // undici reports a request it refuses through onResponseError; should dispatch throw instead, it
      // is the same failure, told after `send` returned, as every answer is.
      queueMicrotask(() => completion.finish(Either.left(failureOf(e))))
    }
    timeline.mark("upstream: request dispatched")
    return completion
  }

  /**
   * A stream is read by a dispatch handler too: its chunks are pushed into the SSE feed as they
   * arrive, rather than through a Readable and its async iterator (docs/decisions/0029). Until it is
   * open (headers, then `start`) the attempt's signal aborts it; from then on the scope does.
   * Interruptible while it opens (a client that hangs up then aborts the request).
   */
  const open: Upstream["open"] = <A>(payload: string, start: (events: DataEvents) => Promise<A>, ended?: () => boolean, opened?: (value: A) => boolean) =>
    Effect.uninterruptibleMask((restore) =>
      restore(
        attempt(
          (signal) =>
            new Promise<{ readonly feed: SseFeed; readonly value: A }>((resolve, reject) => {
              let status = 0
              let feed: SseFeed | undefined
              // A status ≥ 400: its body, for the upstream's error message.
              let refusal: Array<Buffer> | undefined
              pool.dispatch(
                { method: "POST", path, headers: streamHeaders, body: payload },
                {
                  onRequestStart: abortedBy(signal),
                  onResponseStart: (c, statusCode) => {
                    timeline.mark("upstream: headers received")
                    status = statusCode
                    if (statusCode >= 400) {
                      refusal = []
                      return
                    }
                    const fed = makeSseFeed(
                      { pause: () => c.pause(), resume: () => c.resume(), release: () => c.aborted || c.abort(new undiciErrors.RequestAbortedError()) },
                      failureOf,
                      ended
                    )
                    feed = fed
                    start(fed.events).then(
                      (value) => {
                        let took = false
                        if (opened !== undefined && !signal.aborted) {
                          try {
                            took = opened(value)
                          } catch (defect) {
                            // Not an unhandled rejection in undici's callback: the attempt dies, the request is released.
                            fed.stop()
                            return reject(new CallerDefect(defect))
                          }
                        }
                        if (took) setImmediate(() => resolve({ feed: fed, value }))
                        else resolve({ feed: fed, value })
                      },
                      (e: unknown) => {
                        fed.stop()
                        reject(e)
                      }
                    )
                  },
                  onResponseData: (_, chunk) => {
                    if (refusal !== undefined) refusal.push(chunk)
                    else feed?.data(chunk)
                  },
                  onResponseEnd: () => {
                    if (refusal !== undefined) reject(refused(status, refusal))
                    else feed?.end()
                  },
                  onResponseError: (_, e) => {
                    if (feed !== undefined) feed.fail(e)
                    else reject(status >= 400 ? refused(status, "broken") : e)
                  }
                }
              )
              timeline.mark("upstream: request dispatched")
            })
        )
      ).pipe(
        // Scope.addFinalizer, not Effect.addFinalizer: that one runs its finalizer under the acquiring
        // fiber's FiberRefs, diffing the whole context twice at every close (≈ 90 µs a stream,
        // docs/decisions/0038), and `stop` reads no FiberRef.
        Effect.tap(({ feed }) => Effect.flatMap(Effect.scope, (scope) => Scope.addFinalizer(scope, Effect.sync(() => feed.stop())))),
        Effect.map(({ value }) => value)
      )
    )

  const protocol = (message: string) => new UpstreamFailure({ reason: "protocol", message: `provider ${name} ${message}`, retryable: true })

  return { protocol, failureOf, send, open }
}

/** A body that must be a JSON object, or a protocol failure. */
export const parseJsonObject = (upstream: Upstream, text: string): Either.Either<Record<string, unknown>, UpstreamFailure> => {
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    return Either.left(upstream.protocol("sent a body that is not JSON"))
  }
  return json !== null && typeof json === "object" && !Array.isArray(json)
    ? Either.right(json as Record<string, unknown>)
    : Either.left(upstream.protocol("sent a body that is not a JSON object"))
}
