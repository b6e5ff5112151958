/**
 * OpenAI-compatible upstream (OpenAI itself, vLLM, Ollama, llama.cpp server, Groq, Together, …):
 * POST {base_url}/chat/completions with the server-held key. The body is already OpenAI-shaped.
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { Duration, Effect, Redacted, Stream } from "effect"
import type { ProviderConfig, RouteConfig } from "../domain/config.ts"
import { catchTransport, type ChatProvider, statusFailure, timeoutFailure, UpstreamFailure, upstreamErrorDetail } from "./Provider.ts"
import { sseData } from "./sse.ts"

type OpenAIConfig = Extract<ProviderConfig, { type: "openai" }>

export const makeOpenAIProvider = (
  name: string,
  config: OpenAIConfig,
  client: HttpClient.HttpClient,
  defaultTimeoutMs: number
): ChatProvider => {
  const apiKey = config.api_key_env === undefined ? undefined : process.env[config.api_key_env]
  const secret = apiKey === undefined ? undefined : Redacted.make(apiKey)
  const url = `${config.base_url.replace(/\/+$/, "")}/chat/completions`
  const timeout = Duration.millis(config.timeout_ms ?? defaultTimeoutMs)
  const timedOut = timeoutFailure(name, Duration.toMillis(timeout))

  const request = (route: RouteConfig, body: Record<string, unknown>) => {
    const req = HttpClientRequest.post(url).pipe(
      HttpClientRequest.bodyText(JSON.stringify({ ...body, model: route.upstream_model }), "application/json")
    )
    return secret === undefined ? req : HttpClientRequest.bearerToken(req, Redacted.value(secret))
  }

  const complete: ChatProvider["complete"] = (route, body) =>
    Effect.scoped(
      Effect.gen(function* () {
        const res = yield* client.execute(request(route, body))
        const text = yield* res.text
        if (res.status >= 400) return yield* statusFailure(res.status, upstreamErrorDetail(text))
        let json: unknown
        try {
          json = JSON.parse(text)
        } catch {
          return yield* new UpstreamFailure({ reason: "protocol", message: `provider ${name} sent a body that is not JSON`, retryable: true })
        }
        if (json === null || typeof json !== "object" || Array.isArray(json)) {
          return yield* new UpstreamFailure({ reason: "protocol", message: `provider ${name} sent a body that is not a JSON object`, retryable: true })
        }
        return { raw: text, json: json as Record<string, unknown> }
      })
    ).pipe(
      catchTransport(name),
      Effect.timeoutFail({ duration: timeout, onTimeout: timedOut })
    )

  const stream: ChatProvider["stream"] = (route, body) =>
    Effect.gen(function* () {
      const res = yield* client.execute(request(route, body)).pipe(
        catchTransport(name),
        Effect.timeoutFail({ duration: timeout, onTimeout: timedOut })
      )
      if (res.status >= 400) {
        const text = yield* res.text.pipe(Effect.orElseSucceed(() => ""))
        return yield* statusFailure(res.status, upstreamErrorDetail(text))
      }
      return sseData(res.stream).pipe(
        Stream.catchAll((e) =>
          Stream.fail(
            e instanceof UpstreamFailure
              ? e
              : new UpstreamFailure({ reason: "connect", message: `provider ${name} stream broke: ${String((e as { cause?: unknown }).cause ?? e)}`, retryable: true })
          )
        ),
        Stream.takeWhile((data) => data !== "[DONE]")
      )
    })

  return { type: "openai", complete, stream }
}
