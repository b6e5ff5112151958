/**
 * Anthropic Messages API upstream: POST {base_url}/v1/messages with `x-api-key`. The Gateway speaks
 * OpenAI, so this adapter maps the chat completion request to a Messages request (anthropic/request.ts),
 * the Message back to an OpenAI `chat.completion` (anthropic/response.ts), and the SSE event stream to
 * chunk payloads (anthropic/stream.ts). The transport is the one OpenAI uses (transport.ts: undici,
 * the same timeouts, pooling, aborts and failures); the stream is read by the one SSE reader (sse.ts).
 */
import { Either, Redacted } from "effect"
import type { ProviderConfig, RouteConfig } from "../domain/config.ts"
import type { Json } from "./anthropic/json.ts"
import { toAnthropicRequest } from "./anthropic/request.ts"
import { toOpenAICompletion } from "./anthropic/response.ts"
import { makeStreamTranslator, startedEvents, translatedEvents } from "./anthropic/stream.ts"
import { type ChatProvider, completeBy, type Send, type StartStream, streamBy, type UpstreamFailure, type UpstreamReply, upstreamErrorDetail } from "./Provider.ts"
import { makeUpstream, parseJsonObject } from "./transport.ts"

type AnthropicConfig = Extract<ProviderConfig, { type: "anthropic" }>

export const ANTHROPIC_VERSION = "2023-06-01"
export const DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"

export const anthropicMessagesUrl = (baseUrl: string | undefined): string =>
  `${(baseUrl ?? DEFAULT_ANTHROPIC_BASE_URL).replace(/\/+$/, "").replace(/\/v1$/, "")}/v1/messages`

export const makeAnthropicProvider = (name: string, config: AnthropicConfig, defaultTimeoutMs: number): ChatProvider => {
  const apiKey = config.api_key_env === undefined ? undefined : process.env[config.api_key_env]
  const secret = apiKey === undefined ? undefined : Redacted.make(apiKey)
  const upstream = makeUpstream({
    name,
    url: anthropicMessagesUrl(config.base_url),
    timeoutMs: config.timeout_ms ?? defaultTimeoutMs,
    headers: {
      "content-type": "application/json",
      "anthropic-version": ANTHROPIC_VERSION,
      accept: "application/json",
      ...(secret === undefined ? {} : { "x-api-key": Redacted.value(secret) })
    },
    streamHeaders: { accept: "text/event-stream" }
  })

  /** The Messages body, serialized before any attempt (a failure here is the gateway's defect). */
  const payloadOf = (route: RouteConfig, body: Json, stream: boolean): string => {
    const payload = toAnthropicRequest(route, body)
    if (stream) payload.stream = true
    return JSON.stringify(payload)
  }

  /** The Message answered, as an OpenAI chat completion dated `now`. */
  const completionOf = (route: RouteConfig, text: string, now: number): Either.Either<UpstreamReply, UpstreamFailure> =>
    Either.flatMap(parseJsonObject(upstream, text), (json) => {
      if (json.type === "error") return Either.left(upstream.protocol(`answered with an error: ${upstreamErrorDetail(text)}`))
      if (!Array.isArray(json.content)) return Either.left(upstream.protocol("sent a body that is not an Anthropic message"))
      const completion = toOpenAICompletion(json, route.upstream_model, now)
      return Either.right({ raw: JSON.stringify(completion), json: completion })
    })

  const send: Send = (route, body, clock, done) =>
    upstream.send(payloadOf(route, body, false), (result) => done(Either.flatMap(result, (text) => completionOf(route, text, clock.unsafeCurrentTimeMillis()))))

  const startStream: StartStream = (route, body, clock, done, opened) => {
    const payload = payloadOf(route, body, true)
    const translator = makeStreamTranslator(name, route.upstream_model, clock.unsafeCurrentTimeMillis())
    // Read up to the first chunk before handing the stream over, within the opening's deadline.
    return upstream.openThen(payload, (events) => startedEvents(translatedEvents(events, translator)), () => translator.done, opened, done)
  }

  return { type: "anthropic", complete: completeBy(send), send, stream: streamBy(startStream), startStream }
}
