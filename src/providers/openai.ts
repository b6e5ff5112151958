/**
 * OpenAI-compatible upstream (OpenAI itself, vLLM, Ollama, llama.cpp server, Groq, Together, …):
 * POST {base_url}/chat/completions with the server-held key. The body is already OpenAI-shaped.
 *
 * This is the hot path of most deployments, so it talks to undici directly (one keep-alive pool per
 * provider) instead of through Effect's HttpClient: measured ≈ 1.5 ms → well under 1 ms of CPU per
 * call on the bench box (bench/README.md). Timeouts are undici's own (headers, and idle time between
 * body chunks), and an interrupted call aborts its request.
 */
import { Effect, Redacted } from "effect"
import { Agent, errors as undiciErrors, request } from "undici"
import type { ProviderConfig, RouteConfig } from "../domain/config.ts"
import { type ChatProvider, statusFailure, timeoutFailure, transportFailure, UpstreamFailure, upstreamErrorDetail } from "./Provider.ts"
import { sseEvents } from "./sse.ts"

type OpenAIConfig = Extract<ProviderConfig, { type: "openai" }>

export const makeOpenAIProvider = (name: string, config: OpenAIConfig, defaultTimeoutMs: number): ChatProvider => {
  const apiKey = config.api_key_env === undefined ? undefined : process.env[config.api_key_env]
  const secret = apiKey === undefined ? undefined : Redacted.make(apiKey)
  const url = `${config.base_url.replace(/\/+$/, "")}/chat/completions`
  const timeoutMs = config.timeout_ms ?? defaultTimeoutMs
  const dispatcher = new Agent({ connections: 512, keepAliveTimeout: 30_000, headersTimeout: timeoutMs, bodyTimeout: timeoutMs })
  const timedOut = timeoutFailure(name, timeoutMs)

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
   * Effect.async rather than tryPromise: tryPromise's signal would be a second AbortController per call.
   */
  const attempt = <A>(work: (signal: AbortSignal) => Promise<A>): Effect.Effect<A, UpstreamFailure> =>
    Effect.async<A, UpstreamFailure>((resume) => {
      const controller = new AbortController()
      let timedOutNow = false
      const timer = setTimeout(() => {
        timedOutNow = true
        controller.abort()
      }, timeoutMs)
      // A synchronous throw of `work` is a bug of ours, not an upstream failure: it is a defect (it
      // escapes Effect.async), which never counts against the route's breaker (src/services/Router.ts).
      work(controller.signal).then(
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
        controller.abort()
      })
    })

  /**
   * The request's JSON, serialized before any attempt: a body that cannot be serialized is the
   * gateway's failure (a defect), never the upstream's.
   */
  const payloadOf = (route: RouteConfig, body: Record<string, unknown>): string => JSON.stringify({ ...body, model: route.upstream_model })

  const send = (payload: string, signal: AbortSignal) =>
    request(url, {
      method: "POST",
      dispatcher,
      signal,
      headers: {
        "content-type": "application/json",
        ...(secret === undefined ? {} : { authorization: `Bearer ${Redacted.value(secret)}` })
      },
      body: payload
    })

  const parseObject = (text: string): Effect.Effect<Record<string, unknown>, UpstreamFailure> => {
    let json: unknown
    try {
      json = JSON.parse(text)
    } catch {
      return Effect.fail(new UpstreamFailure({ reason: "protocol", message: `provider ${name} sent a body that is not JSON`, retryable: true }))
    }
    return json !== null && typeof json === "object" && !Array.isArray(json)
      ? Effect.succeed(json as Record<string, unknown>)
      : Effect.fail(new UpstreamFailure({ reason: "protocol", message: `provider ${name} sent a body that is not a JSON object`, retryable: true }))
  }

  const complete: ChatProvider["complete"] = (route, body) =>
    Effect.suspend(() => {
      const payload = payloadOf(route, body)
      return attempt(async (signal) => {
        const res = await send(payload, signal)
        return { status: res.statusCode, text: await res.body.text() }
      })
    }).pipe(
      Effect.flatMap(({ status, text }) =>
        status >= 400 ? Effect.fail(statusFailure(status, upstreamErrorDetail(text))) : Effect.map(parseObject(text), (json) => ({ raw: text, json }))
      )
    )

  const stream: ChatProvider["stream"] = (route, body) =>
    Effect.gen(function* () {
      const payload = payloadOf(route, body)
      const res = yield* Effect.acquireRelease(
        attempt((signal) => send(payload, signal)),
        // Destroying an unfinished undici body emits 'error' (RequestAbortedError): absorb it, or a
        // client that hangs up mid-stream would crash the process with an unhandled 'error' event.
        (res) => Effect.sync(() => res.body.on("error", () => {}).destroy())
      )
      if (res.statusCode >= 400) {
        const text = yield* Effect.tryPromise(() => res.body.text()).pipe(Effect.orElseSucceed(() => ""))
        return yield* statusFailure(res.statusCode, upstreamErrorDetail(text))
      }
      res.body.on("error", () => {}) // iteration sees the error; stopping at [DONE] destroys the body
      return sseEvents(res.body, failureOf)
    })

  return { type: "openai", complete, stream }
}
