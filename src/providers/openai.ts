/**
 * OpenAI-compatible upstream (OpenAI itself, vLLM, Ollama, llama.cpp server, Groq, Together, …):
 * POST {base_url}/chat/completions with the server-held key. The body is already OpenAI-shaped, so
 * this adapter only sets the route's model; the transport (undici, timeouts, aborts, failures) is the
 * shared one of transport.ts.
 */
import { Either, Redacted } from "effect"
import type { ProviderConfig, RouteConfig } from "../domain/config.ts"
import { timeline } from "../domain/timeline.ts"
import { type ChatProvider, completeBy, type DataEvents, type Send, type StartStream, streamBy } from "./Provider.ts"
import { makeUpstream, parseJsonObject } from "./transport.ts"

type OpenAIConfig = Extract<ProviderConfig, { type: "openai" }>

/** An OpenAI stream is served as it opened: nothing to read ahead. */
const asStarted = (events: DataEvents): Promise<DataEvents> => Promise.resolve(events)

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

  const startStream: StartStream = (route, body, _clock, done, opened) => upstream.openThen(payloadOf(route, body), asStarted, undefined, opened, done)

  return { type: "openai", complete: completeBy(send), send, stream: streamBy(startStream), startStream }
}
