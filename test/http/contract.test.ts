/**
 * The fast path keeps the contract: what src/http/fast.ts answers on the two governed endpoints is
 * decoded with the schemas the OpenAPI document is generated from (src/http/schemas.ts) — the JSON
 * successes, every frame of both streams, and each error the endpoints document, whose status must be
 * the error class's (src/domain/errors.ts) and one the document lists for the path.
 */
import { HttpApiSchema } from "@effect/platform"
import { Schema } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { openApiDocument } from "../../src/http/api.ts"
import * as S from "../../src/http/schemas.ts"
import { useMockedGateway } from "../support/gateway.ts"

const MAX_BODY = 4096
const GOVERNED = ["/v1/chat/completions", "/v1/responses"] as const
type Governed = (typeof GOVERNED)[number]

const decode = <A, I>(schema: Schema.Schema<A, I>, value: unknown): A => Schema.decodeUnknownSync(schema)(value)

/** The frames' JSON payloads of an SSE body, up to `data: [DONE]` (chat) or the end (responses). */
const sseData = (text: string): Array<unknown> =>
  text
    .split("\n")
    .filter((line) => line.startsWith("data: ") && line !== "data: [DONE]")
    .map((line) => JSON.parse(line.slice("data: ".length)))

describe("the fast path's answers decode with the contract's schemas", () => {
  const env = useMockedGateway({ beforeAll, afterAll }, undefined, { maxBodyBytes: MAX_BODY })
  const hello = (path: Governed, extra: Record<string, unknown> = {}) =>
    path === "/v1/chat/completions" ? { model: "auto", messages: [{ role: "user", content: "hello" }], ...extra } : { model: "auto", input: "hello", ...extra }
  const post = async (path: Governed, body: unknown, headers: Record<string, string> = {}, key = env.gateway.devKey) => {
    const res = await fetch(`${env.gateway.origin}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
      body: typeof body === "string" ? body : JSON.stringify(body)
    })
    return { status: res.status, contentType: res.headers.get("content-type") ?? "", text: await res.text() }
  }

  it("a JSON success is a ChatCompletion, or a Response, with governance", async () => {
    const chat = await post("/v1/chat/completions", hello("/v1/chat/completions"))
    expect(chat.status).toBe(200)
    expect(decode(S.ChatCompletion, JSON.parse(chat.text)).governance.status).toBe("completed")
    const response = await post("/v1/responses", hello("/v1/responses"))
    expect(response.status).toBe(200)
    expect(decode(S.ResponseObject, JSON.parse(response.text)).governance.status).toBe("completed")
  })

  it("every frame of a chat stream is a ChatCompletionChunk; the last carries governance", async () => {
    const res = await post("/v1/chat/completions", hello("/v1/chat/completions", { stream: true }))
    expect(res.status).toBe(200)
    expect(res.contentType).toMatch(/^text\/event-stream/)
    const chunks = sseData(res.text).map((frame) => decode(S.ChatCompletionChunk, frame))
    expect(chunks.length).toBeGreaterThan(1)
    expect(chunks.at(-1)!.governance?.status).toBe("completed")
    expect(res.text.trimEnd().endsWith("data: [DONE]")).toBe(true)
  })

  it("a response stream ends in response.completed, whose response is a Response with governance", async () => {
    const res = await post("/v1/responses", hello("/v1/responses", { stream: true }))
    expect(res.status).toBe(200)
    const events = sseData(res.text) as Array<{ type: string }>
    for (const event of events) expect(typeof event.type).toBe("string")
    expect(decode(S.ResponseCompletedEvent, events.at(-1)).response.governance.status).toBe("completed")
  })

  /** A development key of a new project (the admin API). */
  const keyOf = async (project: { name: string; budget_credits: number; rate_limit?: { requests_per_minute: number; burst: number } }): Promise<string> => {
    const created = await env.gateway.admin("POST", "/admin/v1/projects", { rate_limit: { requests_per_minute: 600, burst: 100 }, ...project })
    return (await env.gateway.admin("POST", `/admin/v1/projects/${created.body.id}/keys`, { environment: "development" })).body.secret
  }

  /** Each documented error, provoked on the fast path: its documented body schema and what it is sent for. */
  const errors: ReadonlyArray<readonly [name: string, schema: Schema.Schema.Any, send: (path: Governed) => ReturnType<typeof post>]> = [
    ["400 invalid_request_error", S.Errors.invalidRequest, (path) => post(path, { messages: [], input: 1 })],
    ["401 invalid_api_key", S.Errors.invalidApiKey, (path) => post(path, hello(path), {}, "tg_dev_not_a_key")],
    ["402 budget_exceeded", S.Errors.budgetExceeded, async (path) => post(path, hello(path), {}, await keyOf({ name: `broke ${path}`, budget_credits: 0 }))],
    [
      "409 idempotency_conflict",
      S.Errors.idempotencyConflict,
      async (path) => {
        const key = `contract-${path}`
        expect((await post(path, hello(path), { "idempotency-key": key })).status).toBe(200)
        return post(path, hello(path, { temperature: 0.5 }), { "idempotency-key": key })
      }
    ],
    ["413 request_too_large", S.Errors.tooLarge, (path) => post(path, hello(path, { pad: "x".repeat(MAX_BODY) }))],
    [
      "422 unsupported_workflow",
      S.Errors.unsupportedWorkflow,
      (path) =>
        post(
          path,
          path === "/v1/chat/completions"
            ? { model: "auto", messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }
            : { model: "auto", input: [{ role: "user", content: [{ type: "input_image", image_url: "x" }] }] }
        )
    ],
    [
      "429 rate_limited",
      S.Errors.rateLimited,
      async (path) => {
        const key = await keyOf({ name: `slow ${path}`, budget_credits: 1_000_000_000, rate_limit: { requests_per_minute: 1, burst: 1 } })
        expect((await post(path, hello(path), {}, key)).status).toBe(200)
        return post(path, hello(path), {}, key)
      }
    ],
    ["503 route_unavailable", S.Errors.routeUnavailable, (path) => post(path, hello(path, { model: "no-such-route" }))]
  ]

  for (const path of GOVERNED) {
    it.each(errors)(`${path}: %s is the documented body, with the class's status and code`, async (name, schema, send) => {
      const res = await send(path)
      const [status, code] = name.split(" ")
      expect(res.status).toBe(HttpApiSchema.getStatusError(schema))
      expect(String(res.status)).toBe(status)
      expect(res.contentType).toMatch(/^application\/json/)
      expect(decode(schema as Schema.Schema<typeof S.ErrorBody.Type>, JSON.parse(res.text)).error.code).toBe(code)
      expect(Object.keys((openApiDocument.paths as any)[path].post.responses)).toContain(status)
    })
  }
})
