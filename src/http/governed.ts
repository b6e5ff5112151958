/**
 * The governed adapter: what both HTTP paths hand the Gateway for `POST /v1/chat/completions` and
 * `POST /v1/responses`. The running server serves them on the raw fast path (src/http/fast.ts) from
 * `governedCalls` and `handleGoverned`; the Effect routes here serve the same calls through the
 * platform's server, as the reference the fast path's parity tests (test/http/fast.test.ts) compare with.
 */
import { HttpRouter, HttpServerResponse } from "@effect/platform"
import { Effect, Stream } from "effect"
import type { GovernanceError } from "../domain/errors.ts"
import { Gateway, type GatewayReply } from "../services/Gateway.ts"
import type { Principal } from "../services/KeyRegistry.ts"
import { chatCompletionsSurface } from "../services/surfaces/chatCompletions.ts"
import { responsesSurface, responsesToChat } from "../services/surfaces/responses.ts"
import type { Surface } from "../services/surfaces/Surface.ts"
import { authenticatedPost } from "./caller.ts"

/** What a governed endpoint hands the Gateway: the surface that renders, and the chat body to govern. */
export type GovernedCall = (body: unknown) => Effect.Effect<{ readonly surface: Surface; readonly body: unknown }, GovernanceError>

/** The governed endpoints by path; the fast path (src/http/fast.ts) serves the same table. */
export const governedCalls: Readonly<Record<"/v1/chat/completions" | "/v1/responses", GovernedCall>> = {
  "/v1/chat/completions": (body) => Effect.succeed({ surface: chatCompletionsSurface, body }),
  "/v1/responses": (body) =>
    Effect.map(responsesToChat(body), (chat) => ({ surface: responsesSurface(body as Record<string, unknown>), body: chat }))
}

/**
 * Hand an authenticated caller's body to the Gateway on the endpoint's surface, with the request's
 * Idempotency-Key and X-Max-Credits headers: the one place both HTTP paths build a governed call.
 */
export const handleGoverned = (
  gateway: Gateway,
  toCall: GovernedCall,
  principal: Principal,
  clientBody: unknown,
  requestHeaders: Readonly<Record<string, unknown>>,
  headers: Record<string, string>
) =>
  Effect.flatMap(toCall(clientBody), ({ body, surface }) => {
    const text = (name: string) => (typeof requestHeaders[name] === "string" ? (requestHeaders[name] as string) : undefined)
    return gateway.handle({
      principal,
      surface,
      body,
      clientBody,
      idempotencyKeyHeader: text("idempotency-key"),
      maxCreditsHeader: text("x-max-credits"),
      headers
    })
  })

const toResponse = (reply: GatewayReply, headers: Record<string, string>): HttpServerResponse.HttpServerResponse =>
  reply._tag === "Sse"
    ? HttpServerResponse.stream(Stream.fromAsyncIterable(reply.frames, (e: unknown) => e).pipe(Stream.ensuring(Effect.sync(reply.cancel))), {
        contentType: "text/event-stream",
        headers: { ...headers, "cache-control": "no-cache", "x-accel-buffering": "no" }
      })
    : typeof reply.body === "string"
      ? HttpServerResponse.text(reply.body, { status: reply.status, contentType: reply.contentType, headers })
      : HttpServerResponse.uint8Array(reply.body, { status: reply.status, contentType: reply.contentType, headers })

/** A governed endpoint on the platform's server: authenticate, read the body, hand it to the Gateway. */
const governed = (toCall: GovernedCall) =>
  authenticatedPost((principal, req, clientBody, headers) =>
    Effect.flatMap(Gateway, (gateway) =>
      Effect.map(handleGoverned(gateway, toCall, principal, clientBody, req.headers, headers), (reply) => toResponse(reply, headers))
    )
  )

export const governedRoutes = HttpRouter.empty.pipe(
  HttpRouter.post("/v1/chat/completions", governed(governedCalls["/v1/chat/completions"])),
  HttpRouter.post("/v1/responses", governed(governedCalls["/v1/responses"]))
)
