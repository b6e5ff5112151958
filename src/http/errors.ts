/**
 * The ONE place where failures become OpenAI-shaped wire bodies (docs/contract.md §6):
 *   {"error": {"message", "type", "code", "param"}}
 * with the status, type and code each error class carries (src/domain/errors.ts, docs/contract.md §9), `x-should-retry: false` where a retry cannot help
 * (OpenAI SDKs retry 409 and 429 on their own), and Retry-After on 429 and on the 503s a retry cures (store_unavailable, server_overloaded). Anything unexpected
 * (a defect) becomes a 500 with a generic message: no stack trace ever leaves the process.
 */
import { type HttpApiError, HttpServerResponse } from "@effect/platform"
import { Cause, Effect } from "effect"
import type { Duplex } from "node:stream"
import { errorClasses, InvalidRequest, statusOf, type TollgateError, type WireCode, wireCodeOf } from "../domain/errors.ts"
import { pathOf } from "./path.ts"

export interface WireError {
  readonly status: number
  readonly type: string
  readonly code: string | null
  readonly message: string
  readonly param: string | null
  readonly headers: Record<string, string>
}

const noRetry = { "x-should-retry": "false" }

const retryAfter = (ms: number) => ({ "retry-after": String(Math.max(1, Math.ceil(ms / 1000))), "retry-after-ms": String(Math.max(1, Math.ceil(ms))) })

/** The headers an error answers with besides its body: whether and when a retry helps. */
const headersOf = (e: TollgateError): Record<string, string> => {
  switch (e._tag) {
    case "IdempotencyConflict":
      // The original still in flight: a retry later gets its result (an SDK retries on its own).
      return e.retryAfterMs === undefined ? noRetry : { ...retryAfter(e.retryAfterMs), "x-should-retry": "true" }
    case "RateLimited":
      return { ...(e.retryable === false ? noRetry : retryAfter(e.retryAfterMs)), ...(e.limitHeaders ?? { "x-ratelimit-remaining-requests": "0" }) }
    case "RouteUnavailable":
      return e.retryable ? {} : noRetry
    case "StoreUnavailable":
    case "ServerOverloaded":
      return { ...retryAfter(e.retryAfterMs), "x-should-retry": "true" }
    default:
      return noRetry
  }
}

/** Status, type and code of each class, read from its annotations once (an error answer reads no AST). */
const byTag = Object.fromEntries(
  Object.entries(errorClasses).map(([tag, errorClass]) => [tag, { status: statusOf(errorClass), ...wireCodeOf(errorClass) }])
) as { readonly [Tag in TollgateError["_tag"]]: { readonly status: number } & WireCode }

/** An error's wire form: status, type and code from its class (src/domain/errors.ts), headers from its case. */
export const wireError = (e: TollgateError): WireError => {
  const { code, status, type } = byTag[e._tag]
  return {
    status,
    type,
    code: e._tag === "AdminForbidden" ? e.code : code,
    message: e.message,
    param: "param" in e ? (e.param ?? null) : null,
    headers: headersOf(e)
  }
}

export const errorResponse = (w: WireError, extraHeaders: Record<string, string> = {}): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.unsafeJson(
    { error: { message: w.message, type: w.type, code: w.code, param: w.param } },
    { status: w.status, headers: { ...extraHeaders, ...w.headers } }
  )

export const unknownRoute = (method: string, url: string): HttpServerResponse.HttpServerResponse =>
  errorResponse({
    status: 404,
    type: "invalid_request_error",
    code: "unknown_url",
    message: `Unknown request URL: ${method} ${pathOf(url)}.`,
    param: null,
    headers: {}
  })

export const internalError: HttpServerResponse.HttpServerResponse = errorResponse({
  status: 500,
  type: "server_error",
  code: "internal_error",
  message: "The gateway hit an internal error. Nothing was charged for a request that did not complete; retry with the same idempotency key.",
  param: null,
  headers: {}
})

/** Log a defect with its cause for operators; the client only sees `internalError`. */
export const logDefect = (cause: Cause.Cause<unknown>) => Effect.logError("unhandled failure", Cause.pretty(cause))

/**
 * What a client's broken request gets before it reaches a handler (node's 'clientError': a head too
 * large, a malformed request, a head or body that took too long): the same OpenAI error body as any
 * other error, written on the raw socket, then the connection closed. Node's own answer is an empty
 * body; a reset or an already answered request gets nothing.
 */
export const answerClientError = (error: Error & { readonly code?: string }, socket: Duplex): void => {
  const answered = (socket as { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true
  if (error.code === "ECONNRESET" || !socket.writable || answered) {
    socket.destroy()
    return
  }
  const [status, reason, code, message] =
    error.code === "HPE_HEADER_OVERFLOW"
      ? [431, "Request Header Fields Too Large", "request_header_fields_too_large", "The request headers are larger than the server accepts (16 KiB in total)."]
      : error.code === "ERR_HTTP_REQUEST_TIMEOUT"
        ? [408, "Request Timeout", "request_timeout", "The request was not received in time; the connection is closed."]
        : [400, "Bad Request", "invalid_request_error", "The HTTP request is malformed."]
  const body = JSON.stringify({ error: { message, type: "invalid_request_error", code, param: null } })
  socket.once("finish", () => socket.destroy())
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`
  )
}

/**
 * A request the schemas refused, as the 400 a client gets: `param` is the path of the first issue
 * (`period`, `rate_limit.burst`), the message the schema's, never the platform's own error body.
 */
export const decodeFailure = (e: HttpApiError.HttpApiDecodeError): InvalidRequest => {
  const issue = e.issues[0]
  const param = issue === undefined || issue.path.length === 0 ? null : issue.path.map(String).join(".")
  const detail = issue === undefined ? e.message : issue.message
  return new InvalidRequest({ message: param === null ? `Invalid request: ${detail}` : `Invalid ${param}: ${detail}`, param })
}
