/**
 * The one upstream transport: a POST of a JSON payload to a provider on undici, shared by every HTTP
 * adapter (openai.ts, anthropic.ts). One keep-alive pool per provider; undici's own timeouts bound the
 * headers and the idle time between body chunks; one signal per attempt aborts it on interruption (a
 * client that hangs up) or when the provider's timeout passes; every failure is an UpstreamFailure.
 *
 * undici directly rather than Effect's HttpClient: on the hot path that measured ≈ 1.5 ms → well
 * under 1 ms of CPU per call on the bench box (docs/decisions/0019).
 */
import { Either, Exit } from "effect"
import { type Dispatcher, errors as undiciErrors, Pool } from "undici"
import { timeline } from "../domain/timeline.ts"
import { type Abortable, type DataEvents, type Opened, statusFailure, timeoutFailure, transportFailure, UpstreamFailure, upstreamErrorDetail } from "./Provider.ts"
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
   * to the first token) within the timeout. A status ≥ 400 is a status failure. Held by undici's
   * callbacks, as `send` is (docs/decisions/0039): the request is dispatched before `openThen`
   * returns, and `done` is told once what `start` answered, with the stream's `stop` (the reader is
   * gone: abort the body if it is still open before its end), or the failure. A throw of `opened`
   * is told as a defect, the request released.
   * `opened` gets what `start` answered at once, in the callback that has it, unless the attempt
   * was aborted by then; when it takes the stream, `done` is told at the loop's next check phase
   * (a `setImmediate`, before any timer), after the microtasks it started — its first write — ran
   * (ChatProvider.stream). Returns its abort: before `done`, the request is aborted (a stream that
   * `opened` took then breaks) and `done` is never told; after it, a no-op.
   */
  readonly openThen: <A>(
    payload: string,
    start: (events: DataEvents) => Promise<A>,
    ended: (() => boolean) | undefined,
    opened: ((value: A) => boolean) | undefined,
    done: (outcome: Exit.Exit<Opened<A>, UpstreamFailure>) => void
  ) => Abortable
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
 * One attempt in flight: undici's dispatch handler, the provider's timeout and the caller's abort in
 * one object. It lives through the upstream's wait, and every scavenge meanwhile copies what it holds,
 * so it is one object with methods rather than a signal, a timer closure and a closure per callback
 * (docs/decisions/0034). `done` is told once; after an abort, never. Aborted before undici started
 * the request, it is aborted the moment undici does.
 */
abstract class Attempt<R> implements Abortable {
  protected over = false
  protected controller: Dispatcher.DispatchController | undefined = undefined
  private readonly timer: NodeJS.Timeout

  constructor(
    private readonly done: (outcome: R) => void,
    protected readonly failureOf: (e: unknown) => UpstreamFailure,
    private readonly timedOut: () => UpstreamFailure,
    timeoutMs: number
  ) {
    this.timer = setTimeout(timeUp, timeoutMs, this)
  }

  /** The outcome of a failure. */
  protected abstract failed(failure: UpstreamFailure): R

  /** Tell `done` once, and stop the timer. */
  finish(outcome: R): void {
    if (this.over) return
    this.over = true
    clearTimeout(this.timer)
    this.done(outcome)
  }

  /** The timeout is the answer: the abort's own error, which undici may report at once, comes too late. */
  timeUp(): void {
    this.finish(this.failed(this.timedOut()))
    this.controller?.abort(new undiciErrors.RequestAbortedError())
  }

  abort(): void {
    if (this.over) return
    this.over = true
    clearTimeout(this.timer)
    this.controller?.abort(new undiciErrors.RequestAbortedError())
  }

  /** The timeout no longer applies (the caller has the outcome, told a turn later). */
  protected stopTimer(): void {
    clearTimeout(this.timer)
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller
    if (this.over) controller.abort(new undiciErrors.RequestAbortedError())
  }
}

/** An attempt's timer: one function for all of them, the attempt passed as its argument. */
const timeUp = (attempt: { timeUp(): void }): void => attempt.timeUp()

/** One whole completion in flight (`Upstream.send`): its body gathered, its text the outcome. */
class Completion extends Attempt<Either.Either<string, UpstreamFailure>> implements Dispatcher.DispatchHandler {
  private readonly chunks: Array<Buffer> = []
  private status = 0

  protected failed(failure: UpstreamFailure): Either.Either<string, UpstreamFailure> {
    return Either.left(failure)
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

/**
 * One stream opening (`Upstream.openThen`). Until `done` is told, the timeout and the abort stop it;
 * from then on the stream is the caller's, and its `stop` ends it. The SSE feed is made at the
 * headers of a status < 400; a refusal's body is kept for the upstream's error message.
 */
class StreamOpening<A> extends Attempt<Exit.Exit<Opened<A>, UpstreamFailure>> implements Dispatcher.DispatchHandler {
  private status = 0
  private feed: SseFeed | undefined = undefined
  private refusal: Array<Buffer> | undefined = undefined

  constructor(
    private readonly start: (events: DataEvents) => Promise<A>,
    private readonly ended: (() => boolean) | undefined,
    private readonly opened: ((value: A) => boolean) | undefined,
    done: (outcome: Exit.Exit<Opened<A>, UpstreamFailure>) => void,
    failureOf: (e: unknown) => UpstreamFailure,
    timedOut: () => UpstreamFailure,
    timeoutMs: number
  ) {
    super(done, failureOf, timedOut, timeoutMs)
  }

  protected failed(failure: UpstreamFailure): Exit.Exit<Opened<A>, UpstreamFailure> {
    return Exit.fail(failure)
  }

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number): void {
    timeline.mark("upstream: headers received")
    this.status = statusCode
    if (statusCode >= 400) {
      this.refusal = []
      return
    }
    const feed = makeSseFeed(
      { pause: () => controller.pause(), resume: () => controller.resume(), release: () => controller.aborted || controller.abort(new undiciErrors.RequestAbortedError()) },
      this.failureOf,
      this.ended
    )
    this.feed = feed
    this.start(feed.events).then(
      (value) => this.started(feed, value),
      (e: unknown) => {
        feed.stop()
        this.finish(Exit.fail(this.failureOf(e)))
      }
    )
  }

  onResponseData(_: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.refusal !== undefined) this.refusal.push(chunk)
    else this.feed?.data(chunk)
  }

  onResponseEnd(): void {
    if (this.refusal !== undefined) this.finish(Exit.fail(refused(this.status, this.refusal)))
    else this.feed?.end()
  }

  onResponseError(_: Dispatcher.DispatchController, e: Error): void {
    // A feed's reader learns it from the feed (and `start`, still reading ahead, fails with it).
    if (this.feed !== undefined) this.feed.fail(e)
    else this.finish(Exit.fail(this.status >= 400 ? refused(this.status, "broken") : this.failureOf(e)))
  }

  /** `start` answered: hand the stream over — to `opened` first, when it takes it. */
  private started(feed: SseFeed, value: A): void {
    if (this.over) return feed.stop()
    const opening: Opened<A> = { value, stop: feed.stop }
    let took = false
    if (this.opened !== undefined) {
      try {
        took = this.opened(value)
      } catch (defect) {
        // Not a throw in undici's callback: the attempt dies, the request is released.
        feed.stop()
        return this.finish(Exit.die(defect))
      }
    }
    if (!took) return this.finish(Exit.succeed(opening))
    // Its `done` waits for a check phase; meanwhile the abort still breaks the stream `opened` took.
    this.stopTimer()
    setImmediate(() => this.finish(Exit.succeed(opening)))
  }
}

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
   * arrive, rather than through a Readable and its async iterator (docs/decisions/0029). The handler
   * is one `StreamOpening`, which is also its timeout and its abort. Only the opening has to finish
   * within the timeout; the body is then bounded by undici's idle `bodyTimeout`.
   */
  const openThen: Upstream["openThen"] = (payload, start, ended, opened, done) => {
    const opening = new StreamOpening(start, ended, opened, done, failureOf, timedOut, timeoutMs)
    try {
      pool.dispatch({ method: "POST", path, headers: streamHeaders, body: payload }, opening)
    } catch (e) {
      queueMicrotask(() => opening.finish(Exit.fail(failureOf(e))))
    }
    timeline.mark("upstream: request dispatched")
    return opening
  }

  const protocol = (message: string) => new UpstreamFailure({ reason: "protocol", message: `provider ${name} ${message}`, retryable: true })

  return { protocol, failureOf, send, openThen }
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
