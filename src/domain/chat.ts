/**
 * The chat completion request as Tollgate reads it. Only the fields governance needs are checked;
 * every other field passes through to the upstream untouched (docs/contract.md §3). Errors name the
 * offending field the way OpenAI does (`messages[0].content`).
 *
 * What it accepts is the wire schema's (`ChatCompletionRequest`, src/domain/wire/chat.ts, which
 * /openapi.json documents): test/domain/chatParser.property.test.ts holds the two to the same verdict
 * and the same request on generated bodies. A rule changes in both. The parser stays by hand for its
 * errors (the field named, 400 or 422) and its cost on the hot path (≈ 1/7 of the decoder's).
 */
import { Either } from "effect"
import { InvalidRequest, UnsupportedWorkflow } from "./errors.ts"

export interface ChatMessage {
  readonly role: string
  readonly content?: unknown
  readonly name?: unknown
  readonly tool_calls?: unknown
}

export interface ChatRequest {
  readonly model: string
  readonly messages: ReadonlyArray<ChatMessage>
  readonly stream: boolean
  readonly includeUsage: boolean
  /** The client's own output cap: max_completion_tokens, else max_tokens. */
  readonly requestedMaxTokens: number | undefined
  readonly capField: "max_tokens" | "max_completion_tokens"
  readonly metadata: Readonly<Record<string, string>>
  /** Tool definitions count as input tokens. */
  readonly tools: unknown
  /** The end user the call is made for (DESIGN §9): the body's `user`, else `metadata.end_user`. */
  readonly endUser: string | undefined
}

/** Metadata keys Tollgate consumes; they are not forwarded upstream. */
export const GOVERNANCE_METADATA = ["project_id", "environment", "idempotency_key", "max_credits", "end_user"] as const

/** An end user's name: 1 to 256 characters, none of them a control character. */
export const MAX_END_USER_LENGTH = 256
// eslint-disable-next-line no-control-regex
const END_USER = /^[^\p{Cc}]{1,256}$/u

/**
 * The end user a call is made for: the OpenAI body's `user`, else `metadata.end_user`; the same name
 * in both is one end user, two different names a 400 (which one the client meant is unknowable).
 */
export const endUserOf = (user: unknown, fromMetadata: string | undefined): Either.Either<string | undefined, InvalidRequest> => {
  const u = typeof user === "string" ? user : undefined
  if (u !== undefined && !END_USER.test(u)) return Either.left(bad(`'user' must be 1 to ${MAX_END_USER_LENGTH} characters with no control characters.`, "user"))
  if (fromMetadata !== undefined && !END_USER.test(fromMetadata)) {
    return Either.left(bad(`metadata.end_user must be 1 to ${MAX_END_USER_LENGTH} characters with no control characters.`, "metadata.end_user"))
  }
  if (u !== undefined && fromMetadata !== undefined && u !== fromMetadata) {
    return Either.left(bad("'user' and metadata.end_user differ; send one end user, or the same name in both.", "metadata.end_user"))
  }
  return Either.right(u ?? fromMetadata)
}

const ROLES = new Set(["system", "developer", "user", "assistant", "tool", "function"])
const TEXT_PARTS = new Set(["text", "refusal"])

const bad = (message: string, param: string | null) => new InvalidRequest({ message, param })
const unsupported = (message: string, param: string | null) => new UnsupportedWorkflow({ message, param })

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v)

/**
 * A client's output cap (`max_tokens`, `max_completion_tokens`, the Responses API's
 * `max_output_tokens`): absent, null or a positive integer, else a 400 naming `field` as the client wrote it.
 */
export const outputCapError = (body: Record<string, unknown>, field: string): InvalidRequest | undefined => {
  const v = body[field]
  return v === undefined || v === null || (typeof v === "number" && Number.isSafeInteger(v) && v >= 1) ? undefined : bad(`'${field}' must be a positive integer.`, field)
}

const isNumber = (v: unknown) => typeof v === "number" && Number.isFinite(v)
const isInteger = (v: unknown) => typeof v === "number" && Number.isSafeInteger(v)
const isBoolean = (v: unknown) => typeof v === "boolean"
const isString = (v: unknown) => typeof v === "string"

/**
 * The types of the OpenAI fields Tollgate does not read but passes upstream: a wrongly typed one is
 * the client's mistake, answered here as 400 with `param` naming it rather than spending an upstream
 * call (and an attempt of the route) on it. `null` is accepted for each, as OpenAI does; ranges are
 * left to the upstream. Fields not listed pass through unchecked.
 */
const KNOWN_FIELD_TYPES: ReadonlyArray<readonly [field: string, check: (v: unknown) => boolean, expected: string]> = [
  ["temperature", isNumber, "a number"],
  ["top_p", isNumber, "a number"],
  ["presence_penalty", isNumber, "a number"],
  ["frequency_penalty", isNumber, "a number"],
  ["seed", isInteger, "an integer"],
  ["logprobs", isBoolean, "a boolean"],
  ["top_logprobs", isInteger, "an integer"],
  ["parallel_tool_calls", isBoolean, "a boolean"],
  ["store", isBoolean, "a boolean"],
  ["user", isString, "a string"],
  ["service_tier", isString, "a string"],
  ["reasoning_effort", isString, "a string"],
  ["stop", (v) => isString(v) || (Array.isArray(v) && v.every(isString)), "a string or an array of strings"],
  ["logit_bias", (v) => isObject(v) && Object.values(v).every(isNumber), "an object of numbers"],
  ["tools", (v) => Array.isArray(v) && v.every(isObject), "an array of objects"],
  ["tool_choice", (v) => isString(v) || isObject(v), "a string or an object"],
  ["response_format", isObject, "an object"]
]

/** Read a chat completion body: the request, or why it is refused. Synchronous (an Either is also an Effect). */
export const parseChatRequest = (body: unknown): Either.Either<ChatRequest, InvalidRequest | UnsupportedWorkflow> => {
  if (!isObject(body)) return Either.left(bad("The request body must be a JSON object.", null))
  const { model, messages } = body
  if (model === undefined) return Either.left(bad("Missing required parameter: 'model'.", "model"))
  if (typeof model !== "string" || model.length === 0) return Either.left(bad("'model' must be a non-empty string.", "model"))
  if (messages === undefined) return Either.left(bad("Missing required parameter: 'messages'.", "messages"))
  if (!Array.isArray(messages)) return Either.left(bad("'messages' must be an array.", "messages"))
  if (messages.length === 0) return Either.left(bad("'messages' must contain at least one message.", "messages"))
  for (let i = 0; i < messages.length; i++) {
    const m: unknown = messages[i]
    const at = `messages[${i}]`
    if (!isObject(m)) return Either.left(bad(`${at} must be an object.`, at))
    if (typeof m.role !== "string" || !ROLES.has(m.role)) {
      return Either.left(bad(`${at}.role must be one of system, developer, user, assistant, tool.`, `${at}.role`))
    }
    const c = m.content
    if (Array.isArray(c)) {
      for (let j = 0; j < c.length; j++) {
        const part: unknown = c[j]
        if (!isObject(part) || typeof part.type !== "string") {
          return Either.left(bad(`${at}.content[${j}] must be an object with a type.`, `${at}.content[${j}]`))
        }
        if (!TEXT_PARTS.has(part.type)) {
          return Either.left(unsupported(`Content part type '${part.type}' is outside the supported text workflows of the connected beta; only text is accepted.`, `${at}.content[${j}].type`))
        }
        if (typeof part.text !== "string" && typeof part.refusal !== "string") {
          return Either.left(bad(`${at}.content[${j}].text must be a string.`, `${at}.content[${j}].text`))
        }
      }
    } else if (typeof c !== "string" && !(c === null || (c === undefined && m.role === "assistant"))) {
      return Either.left(bad(`${at}.content must be a string or an array of text parts.`, `${at}.content`))
    }
    if (c === null && m.role !== "assistant") return Either.left(bad(`${at}.content must be a string or an array of text parts.`, `${at}.content`))
  }
  if (body.modalities !== undefined && body.modalities !== null) {
    if (!Array.isArray(body.modalities) || body.modalities.some((x) => x !== "text")) {
      return Either.left(unsupported("Only the text modality is supported in the connected beta.", "modalities"))
    }
  }
  if (body.audio !== undefined && body.audio !== null) return Either.left(unsupported("Audio output is outside the supported text workflows.", "audio"))
  for (const [field, check, expected] of KNOWN_FIELD_TYPES) {
    const v = body[field]
    if (v !== undefined && v !== null && !check(v)) return Either.left(bad(`'${field}' must be ${expected}.`, field))
  }
  // `n` has one check, of its value: anything but 1 (a string or 2 alike) is refused.
  if (body.n !== undefined && body.n !== null && body.n !== 1) return Either.left(bad("Tollgate supports n = 1 only.", "n"))
  const badCap = outputCapError(body, "max_tokens") ?? outputCapError(body, "max_completion_tokens")
  if (badCap !== undefined) return Either.left(badCap)
  if (body.stream !== undefined && body.stream !== null && typeof body.stream !== "boolean") return Either.left(bad("'stream' must be a boolean.", "stream"))
  const so = body.stream_options
  if (so !== undefined && so !== null && (!isObject(so) || (so.include_usage !== undefined && typeof so.include_usage !== "boolean"))) {
    return Either.left(bad("'stream_options' must be an object with a boolean include_usage.", "stream_options"))
  }
  const md = body.metadata
  if (md !== undefined && md !== null) {
    if (!isObject(md)) return Either.left(bad("'metadata' must be an object of string values.", "metadata"))
    for (const [k, v] of Object.entries(md)) {
      if (typeof v !== "string") return Either.left(bad(`metadata.${k} must be a string.`, `metadata.${k}`))
    }
  }
  const endUser = endUserOf(body.user, isObject(md) ? (md.end_user as string | undefined) : undefined)
  if (Either.isLeft(endUser)) return Either.left(endUser.left)
  const mct = body.max_completion_tokens
  const mt = body.max_tokens
  return Either.right({
    model,
    messages: messages as ReadonlyArray<ChatMessage>,
    stream: body.stream === true,
    includeUsage: isObject(so) && so.include_usage === true,
    requestedMaxTokens: typeof mct === "number" ? mct : typeof mt === "number" ? mt : undefined,
    capField: typeof mct === "number" ? "max_completion_tokens" : "max_tokens",
    metadata: (isObject(md) ? md : {}) as Record<string, string>,
    tools: body.tools,
    endUser: endUser.right
  })
}

/**
 * The body sent upstream: the client's body minus governance metadata, with the output cap applied.
 * Built key by key in the client's order rather than copied and then `delete`d: a deleted key turns
 * the copy into a slow dictionary object that JSON.stringify walks again (docs/decisions/0015).
 */
export const upstreamBody = (body: Record<string, unknown>, req: ChatRequest, outputCap: number): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  for (const k of Object.keys(body)) {
    if (k === "max_tokens" || k === "max_completion_tokens") continue
    let v = body[k]
    if (k === "metadata" && isObject(v)) {
      const rest: Record<string, unknown> = {}
      let kept = 0
      for (const m of Object.keys(v)) if (!GOVERNANCE_KEYS.has(m)) (defineOwn(rest, m, v[m]), kept++)
      if (kept === 0) continue
      v = rest
    }
    defineOwn(out, k, v)
  }
  out[req.capField] = outputCap
  if (req.stream) out.stream_options = { ...(isObject(body.stream_options) ? body.stream_options : {}), include_usage: true }
  return out
}
const GOVERNANCE_KEYS: ReadonlySet<string> = new Set(GOVERNANCE_METADATA)
/** A plain assignment, except for a client's own "__proto__" key, kept as data as a spread keeps it. */
const defineOwn = (o: Record<string, unknown>, k: string, v: unknown): void => {
  if (k === "__proto__") Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true })
  else o[k] = v
}

/** A governance field a client may send in the body's metadata or as a header: their names, and what it is. */
export interface MetadataOrHeader {
  readonly metadata: string
  readonly header: string
  readonly what: string
}
export const IDEMPOTENCY_KEY: MetadataOrHeader = { metadata: "metadata.idempotency_key", header: "Idempotency-Key", what: "key" }
export const MAX_CREDITS: MetadataOrHeader = { metadata: "metadata.max_credits", header: "X-Max-Credits", what: "cap" }

/**
 * The one value of a field sent in metadata, as a header, or as the same text in both, with where
 * it came from (`param`, for the checks that follow). Two different values are a 400 naming the
 * metadata field: which one the client meant is unknowable, so neither is guessed (a looser credit
 * cap silently winning over a tighter one was issue 38's finding 5).
 */
export const oneValueOf = (
  field: MetadataOrHeader,
  fromMetadata: string | undefined,
  fromHeader: string | undefined
): Either.Either<{ readonly value: string | undefined; readonly param: string }, InvalidRequest> => {
  if (fromMetadata === undefined) return Either.right({ value: fromHeader, param: field.header })
  if (fromHeader !== undefined && fromHeader !== fromMetadata) {
    return Either.left(bad(`The ${field.header} header and ${field.metadata} differ; send one ${field.what}, or the same ${field.what} in both.`, field.metadata))
  }
  return Either.right({ value: fromMetadata, param: field.metadata })
}

/** `metadata.max_credits` / `X-Max-Credits`: a non-negative integer written in decimal. */
export const parseMaxCredits = (value: string | undefined, param: string): Either.Either<number | undefined, InvalidRequest> => {
  if (value === undefined) return Either.right(undefined)
  const trimmed = value.trim()
  if (!/^\d{1,15}$/.test(trimmed)) return Either.left(bad(`${param} must be a non-negative integer number of Credits, as a decimal string.`, param))
  return Either.right(Number(trimmed))
}
