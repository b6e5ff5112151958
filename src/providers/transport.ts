/**
 * The one upstream transport: a POST of a JSON payload to a provider on undici, shared by every HTTP
 * adapter (openai.ts, anthropic.ts). One keep-alive pool per provider; undici's own timeouts bound the
 * headers and the idle time between body chunks; one signal per attempt aborts it on interruption (a
 * client that hangs up) or when the provider's timeout passes; every failure is an UpstreamFailure.
 *
 * undici directly rather than Effect's HttpClient: on the hot path that measured ≈ 1.5 ms → well
 * under 1 ms of CPU per call on the bench box (docs/decisions/0019).
 */
import { Effect, type Scope } from "effect"
import { EventEmitter } from "node:events"
import { type Dispatcher, errors as undiciErrors, Pool } from "undici"
import { timeline } from "../domain/timeline.ts"
import { statusFailure, timeoutFailure, transportFailure, UpstreamFailure, upstreamErrorDetail } from "./Provider.ts"

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

/** A streaming response body, as undici gives it. */
export type UpstreamBody = Dispatcher.ResponseData["body"]

export interface Upstream {
  /** A protocol failure of this provider (`provider <name> <message>`), retryable. */
  readonly protocol: (message: string) => UpstreamFailure
  /** The failure of a body read that broke (a reset, an idle timeout). */
  readonly failureOf: (e: unknown) => UpstreamFailure
  /**
   * POST `payload` and read the whole body within the timeout: its text, or a status failure
   * (carrying the upstream's error message) for a status ≥ 400.
   */
  readonly post: (payload: string) => Effect.Effect<string, UpstreamFailure>
  /**
   * POST `payload` for a streaming body; `start` then reads ahead on it (e.g. up to the first
   * token) within the same deadline and signal. A status ≥ 400 is a status failure. The body lives
   * until `Scope` closes, which destroys it if unfinished.
   */
  readonly open: <A>(payload: string, start: (body: UpstreamBody) => Promise<A>) => Effect.Effect<A, UpstreamFailure, Scope.Scope>
}

/** Destroying an unfinished undici body emits 'error' (RequestAbortedError): absorb it, or a client
 * that hangs up mid-stream would crash the process with an unhandled 'error' event. */
const discard = (body: UpstreamBody): void => {
  body.on("error", () => {}).destroy()
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
          resume(Effect.fail(timedOutNow ? timedOut() : failureOf(e)))
        }
      )
      return Effect.sync(() => {
        clearTimeout(timer)
        signal.abort()
      })
    })

  const send = (payload: string, headers: Readonly<Record<string, string>>, signal: AttemptSignal) => {
    const sent = pool.request({ method: "POST", path, signal, headers, body: payload })
    timeline.mark("upstream: request dispatched")
    return sent
  }

  /** A status ≥ 400 as a failure, with the upstream's error message (its body, read best-effort). */
  const rejected = async (res: Dispatcher.ResponseData): Promise<never> => {
    const text = await res.body.text().catch(() => "")
    throw statusFailure(res.statusCode, upstreamErrorDetail(text))
  }

  /**
   * A whole completion is gathered by a dispatch handler rather than request() + body.text(): that
   * wraps every answer in a Readable stream and reads it through events, a nextTick and a chain of
   * promises (≈ 7 µs CPU a call in a loopback microbench, more on a cold call; docs/decisions/0026).
   * The signal aborts the request whether it fires before or after undici starts it.
   */
  const post: Upstream["post"] = (payload) =>
    attempt(
      (signal) =>
        new Promise<string>((resolve, reject) => {
          const chunks: Array<Buffer> = []
          let status = 0
          let controller: Dispatcher.DispatchController | undefined
          signal.once("abort", () => controller?.abort(new undiciErrors.RequestAbortedError()))
          timeline.mark("upstream: attempt set up (signal, timer)")
          pool.dispatch(
            { method: "POST", path, headers: options.headers, body: payload },
            {
              onRequestStart: (c) => {
                controller = c
                if (signal.aborted) c.abort(new undiciErrors.RequestAbortedError())
              },
              onResponseStart: (_, statusCode) => {
                timeline.mark("upstream: headers received")
                status = statusCode
              },
              onResponseData: (_, chunk) => {
                chunks.push(chunk)
              },
              onResponseEnd: () => {
                // Here, not in `attempt`: a stream's attempt ends when it opens, long before its body.
                timeline.mark("upstream: body read")
                const text = chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks).toString("utf8")
                if (status >= 400) reject(statusFailure(status, upstreamErrorDetail(text)))
                else resolve(text)
              },
              // An error status whose body broke is still that status (its detail read best-effort).
              onResponseError: (_, e) => reject(status >= 400 ? statusFailure(status, "") : e)
            }
          )
          timeline.mark("upstream: request dispatched")
        })
    )

  // Interruptible while it opens (a client that hangs up then aborts the request, as with `post`);
  // from the moment it is open, the body's release is in the scope.
  const open: Upstream["open"] = (payload, start) =>
    Effect.uninterruptibleMask((restore) =>
      restore(
        attempt(async (signal) => {
          const res = await send(payload, streamHeaders, signal)
          timeline.mark("upstream: headers received")
          if (res.statusCode >= 400) return rejected(res)
          res.body.on("error", () => {}) // a reader sees the error; an unread one must not crash the process
          try {
            return { body: res.body, value: await start(res.body) }
          } catch (e) {
            discard(res.body)
            throw e
          }
        })
      ).pipe(
        Effect.tap(({ body }) => Effect.addFinalizer(() => Effect.sync(() => discard(body)))),
        Effect.map(({ value }) => value)
      )
    )

  const protocol = (message: string) => new UpstreamFailure({ reason: "protocol", message: `provider ${name} ${message}`, retryable: true })

  return { protocol, failureOf, post, open }
}

/** A body that must be a JSON object, or a protocol failure. */
export const parseJsonObject = (upstream: Upstream, text: string): Effect.Effect<Record<string, unknown>, UpstreamFailure> => {
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    return Effect.fail(upstream.protocol("sent a body that is not JSON"))
  }
  return json !== null && typeof json === "object" && !Array.isArray(json)
    ? Effect.succeed(json as Record<string, unknown>)
    : Effect.fail(upstream.protocol("sent a body that is not a JSON object"))
}
