/**
 * Reading a request in the Effect handlers: a header as a string, and a JSON body within the size and
 * depth limits (src/http/body.ts: 413 when larger, 400 when too deep or not JSON).
 */
import { HttpServerRequest } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { HttpApiError } from "@effect/platform"
import { Effect, Schema } from "effect"
import { Settings } from "../domain/config.ts"
import { InvalidRequest, type PayloadTooLarge } from "../domain/errors.ts"
import { type BodyLimits, readJsonBody } from "./body.ts"
import { decodeFailure } from "./errors.ts"

/**
 * A header as a string (absent, or repeated as an array: undefined), for an Effect request and for the
 * fast path's node IncomingMessage alike: the node server's Effect request hands out the
 * IncomingMessage's own headers object, so both read the same record the same way.
 */
export const header = (req: { readonly headers: { readonly [name: string]: string | ReadonlyArray<string> | undefined } }, name: string): string | undefined => {
  const v = req.headers[name]
  return typeof v === "string" ? v : undefined
}

/** Read and parse a JSON body within the size and depth limits. */
export const readJson = (limits: BodyLimits) =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (req) =>
    Effect.async<unknown, PayloadTooLarge | InvalidRequest>((resume) =>
      readJsonBody(NodeHttpServerRequest.toIncomingMessage(req), limits, (r) => resume(r.ok ? Effect.succeed(r.value) : Effect.fail(r.error)))
    )
  )

/** A JSON object body (admin writes, sign-in), read within the gateway's body limits. */
export const jsonObjectBody = Effect.gen(function* () {
  const body = yield* readJson(yield* Settings)
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    return yield* new InvalidRequest({ message: "The request body must be a JSON object.", param: null })
  }
  return body as Record<string, unknown>
})

/** A JSON object body when the request has one, else `{}`. */
export const optionalObjectBody = Effect.gen(function* () {
  const req = yield* HttpServerRequest.HttpServerRequest
  const length = Number(header(req, "content-length") ?? "0")
  return length > 0 || header(req, "transfer-encoding") !== undefined ? yield* jsonObjectBody : {}
})

/**
 * An admin write's payload: the JSON body read within the body limits (413 / 400 before JSON.parse),
 * then decoded by the endpoint's payload schema; a refused field is a 400 naming it as `param`.
 * `optional`: a request without a body decodes `{}` (key rotation).
 */
export const decodedBody = <A, I>(schema: Schema.Schema<A, I>, options: { readonly optional?: boolean } = {}) =>
  Effect.flatMap(options.optional === true ? optionalObjectBody : jsonObjectBody, (body) =>
    Schema.decodeUnknown(schema)(body).pipe(
      Effect.catchTag("ParseError", (e) => Effect.flatMap(HttpApiError.HttpApiDecodeError.fromParseError(e), (refused) => Effect.fail(decodeFailure(refused))))
    )
  )
