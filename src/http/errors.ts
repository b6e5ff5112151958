/**
 * The ONE place where failures become OpenAI-shaped wire bodies (docs/contract.md §6):
 *   {"error": {"message", "type", "code", "param"}}
 * with the status of the error table (docs/contract.md §9), `x-should-retry: false` where a retry cannot help
 * (OpenAI SDKs retry 409 and 429 on their own), and Retry-After on 429. Anything unexpected
 * (a defect) becomes a 500 with a generic message: no stack trace ever leaves the process.
 */
import { HttpServerResponse } from "@effect/platform"
import { Cause, Effect } from "effect"
import type { Duplex } from "node:stream"
import type { AdminError, GovernanceError } from "../domain/errors.ts"

export interface WireError {
  readonly status: number
  readonly type: string
  readonly code: string | null
  readonly message: string
  readonly param: string | null
  readonly headers: Record<string, string>
}

const noRetry = { "x-should-retry": "false" }

export const wireError = (e: GovernanceError | AdminError): WireError => {
  switch (e._tag) {
    case "InvalidApiKey":
      return { status: 401, type: "invalid_request_error", code: "invalid_api_key", message: e.message, param: null, headers: noRetry }
    case "BudgetExceeded":
      return { status: 402, type: "budget_error", code: "budget_exceeded", message: e.message, param: e.param, headers: noRetry }
    case "RequestNotFound":
      return { status: 404, type: "invalid_request_error", code: "request_not_found", message: e.message, param: null, headers: noRetry }
    case "IdempotencyConflict":
      return {
        status: 409,
        type: "invalid_request_error",
        code: "idempotency_conflict",
        message: e.message,
        param: null,
        // The original still in flight: a retry later gets its result (an SDK retries on its own).
        headers:
          e.retryAfterMs === undefined
            ? noRetry
            : { "retry-after": String(Math.max(1, Math.ceil(e.retryAfterMs / 1000))), "retry-after-ms": String(Math.max(1, Math.ceil(e.retryAfterMs))), "x-should-retry": "true" }
      }
    case "UnsupportedWorkflow":
      return { status: 422, type: "invalid_request_error", code: "unsupported_workflow", message: e.message, param: e.param, headers: noRetry }
    case "RateLimited":
      return {
        status: 429,
        type: "rate_limit_error",
        code: "rate_limited",
        message: e.message,
        param: null,
        headers: {
          "retry-after": String(Math.max(1, Math.ceil(e.retryAfterMs / 1000))),
          "retry-after-ms": String(Math.max(1, Math.ceil(e.retryAfterMs))),
          "x-ratelimit-remaining-requests": "0"
        }
      }
    case "RouteUnavailable":
      return { status: 503, type: "server_error", code: "route_unavailable", message: e.message, param: null, headers: e.retryable ? {} : noRetry }
    case "InvalidRequest":
      return { status: 400, type: "invalid_request_error", code: "invalid_request_error", message: e.message, param: e.param, headers: noRetry }
    case "PayloadTooLarge":
      return { status: 413, type: "invalid_request_error", code: "request_too_large", message: e.message, param: null, headers: noRetry }
    case "AdminNotFound":
      return { status: 404, type: "invalid_request_error", code: "not_found", message: e.message, param: null, headers: noRetry }
    case "AdminUnauthorized":
      return { status: 401, type: "invalid_request_error", code: "invalid_admin_token", message: e.message, param: null, headers: noRetry }
    case "AdminForbidden":
      return { status: 403, type: "invalid_request_error", code: e.code, message: e.message, param: null, headers: noRetry }
    case "AdminConflict":
      return { status: 409, type: "invalid_request_error", code: "conflict", message: e.message, param: null, headers: noRetry }
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
    message: `Unknown request URL: ${method} ${url.split("?")[0]}.`,
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
