/**
 * OpenAI-compatible upstream (OpenAI itself, vLLM, Ollama, llama.cpp server, Groq, Together, …):
 * POST {base_url}/chat/completions with the server-held key. The body is already OpenAI-shaped, so
 * this adapter only sets the route's model; the transport (undici, timeouts, aborts, failures) is the
 * shared one of transport.ts.
 */
import { Effect, Either, Redacted } from "effect"
import type { ProviderConfig, RouteConfig } from "../domain/config.ts"
import { timeline } from "../domain/timeline.ts"
import { type ChatProvider, completeBy, type Send } from "./Provider.ts"
import { makeUpstream, parseJsonObject } from "./transport.ts"

type OpenAIConfig = Extract<ProviderConfig, { type: "openai" }>

export const makeOpenAIProvider = (name: string, config: OpenAIConfig, defaultTimeoutMs: number): ChatProvider => {
  const apiKey = config.api_key_env === undefined ? undefined : process.env[config.api_key_env]
  const secret = apiKey === undefined ? undefined : Redacted.make(apiKey)
  const upstream = makeUpstream({
    name,
    url: `${config.base_url.replace(/\/+$/, "")}/chat/completions`,
    timeoutMs: config.timeout_ms ?? defaultTimeoutMs,
    headers: {
      "content-type": "application/json",
      ...(secret === undefined ? {} : { authorization: `Bearer ${Redacted.value(secret)}` })
    }
  })

  /**
   * The request's JSON, serialized before any attempt: a body that cannot be serialized is the
   * gateway's failure (a defect), never the upstream's.
   */
  const payloadOf = (route: RouteConfig, body: Record<string, unknown>): string => {
    const payload = JSON.stringify({ ...body, model: route.upstream_model })
    timeline.mark("upstream: body built + JSON text")
    return payload
  }

  const send: Send = (route, body, _clock, done) =>
    upstream.send(payloadOf(route, body), (result) =>
      done(
        Either.flatMap(result, (text) => {
          const json = parseJsonObject(upstream, text)
          timeline.mark("upstream: JSON parsed")
          return Either.map(json, (object) => ({ raw: text, json: object }))
        })
      )
    )

  const stream: ChatProvider["stream"] = (route, body, opened) =>
    Effect.suspend(() => upstream.open(payloadOf(route, body), async (events) => events, undefined, opened))

  return { type: "openai", complete: completeBy(send), send, stream }
}
