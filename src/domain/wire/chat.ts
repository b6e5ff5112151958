/**
 * The chat completion request as the wire carries it: what `/openapi.json` documents (re-exported by
 * src/http/schemas.ts) and exactly what the governed path accepts. The hot path reads a body with the
 * hand parser of ../chat.ts (`parseChatRequest`: no allocation past its answer, a fraction of this
 * schema's decode); test/domain/chatParser.property.test.ts holds the two to the same verdict and the
 * same value on generated bodies, valid and broken. A rule changes in both, or that test fails.
 *
 * Bodies come from JSON.parse, so a number here is always finite (`Schema.Number` is exact for them).
 */
import { Schema } from "effect"

/** Any other fields of an object: kept as they are and passed upstream. */
export const Extra = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/** An end user's name (DESIGN §9): 1 to 256 characters, none a control character. */
export const EndUser = Schema.String.pipe(Schema.pattern(/^[^\p{Cc}]{1,256}$/u)).annotations({
  identifier: "EndUser",
  description: "The end user a call is made for, 1 to 256 characters with no control characters: budgets and usage per end user."
})

export const Metadata = Schema.Struct(
  { end_user: Schema.optional(EndUser) },
  Schema.Record({ key: Schema.String, value: Schema.String })
).annotations({
  description:
    "OpenAI metadata. Tollgate reads project_id, environment, idempotency_key, max_credits (a decimal integer string) and end_user (used when `user` is absent) and does not forward them."
})

/** `user` and `metadata.end_user` name one end user: both may be sent only with the same name. */
export const oneEndUser = (b: { readonly user?: string | null | undefined; readonly metadata?: { readonly end_user?: string | undefined } | null | undefined }): boolean =>
  typeof b.user !== "string" || b.metadata?.end_user === undefined || b.metadata.end_user === b.user

const PartType = Schema.Literal("text", "refusal")

/** A content part: text (or a refusal an assistant gave), with its `text` or `refusal` a string. Images, audio and files are outside the beta (422). */
export const TextPart = Schema.Union(
  Schema.Struct({ type: PartType, text: Schema.String }, Extra),
  Schema.Struct({ type: PartType, refusal: Schema.String }, Extra)
).annotations({ identifier: "TextPart", description: "A text part (type text, or refusal in an assistant's turn); its text or refusal is a string." })

const Content = Schema.Union(Schema.String, Schema.Array(TextPart))

export const ChatMessage = Schema.Union(
  Schema.Struct({ role: Schema.Literal("system", "developer", "user", "tool", "function"), content: Content }, Extra),
  Schema.Struct({ role: Schema.Literal("assistant"), content: Schema.optional(Schema.NullOr(Content)) }, Extra)
).annotations({ identifier: "ChatMessage", description: "Only an assistant's turn may leave content out or null (it called tools)." })

/** A client's output cap: absent, null or a positive integer. */
const OutputCap = Schema.optional(Schema.NullOr(Schema.Int.pipe(Schema.greaterThanOrEqualTo(1))))

export const ChatCompletionRequest = Schema.Struct(
  {
    model: Schema.String.pipe(Schema.minLength(1)).annotations({ description: "A route name, or `auto`." }),
    messages: Schema.NonEmptyArray(ChatMessage),
    metadata: Schema.optional(Schema.NullOr(Metadata)),
    max_tokens: OutputCap,
    max_completion_tokens: OutputCap.annotations({ description: "Wins over max_tokens when both are sent." }),
    stream: Schema.optional(Schema.NullOr(Schema.Boolean)),
    stream_options: Schema.optional(Schema.NullOr(Schema.Struct({ include_usage: Schema.optional(Schema.Boolean) }, Extra))),
    // Text only in the connected beta (422 unsupported_workflow otherwise).
    modalities: Schema.optional(Schema.NullOr(Schema.Array(Schema.Literal("text")))),
    audio: Schema.optional(Schema.Null.annotations({ description: "Audio output is outside the beta: absent or null." })),
    // Passed upstream, but their types are checked (400 naming the field): src/domain/chat.ts.
    temperature: Schema.optional(Schema.NullOr(Schema.Number)),
    top_p: Schema.optional(Schema.NullOr(Schema.Number)),
    presence_penalty: Schema.optional(Schema.NullOr(Schema.Number)),
    frequency_penalty: Schema.optional(Schema.NullOr(Schema.Number)),
    seed: Schema.optional(Schema.NullOr(Schema.Int)),
    n: Schema.optional(Schema.NullOr(Schema.Literal(1))),
    logprobs: Schema.optional(Schema.NullOr(Schema.Boolean)),
    top_logprobs: Schema.optional(Schema.NullOr(Schema.Int)),
    parallel_tool_calls: Schema.optional(Schema.NullOr(Schema.Boolean)),
    store: Schema.optional(Schema.NullOr(Schema.Boolean)),
    user: Schema.optional(Schema.NullOr(EndUser)),
    service_tier: Schema.optional(Schema.NullOr(Schema.String)),
    reasoning_effort: Schema.optional(Schema.NullOr(Schema.String)),
    stop: Schema.optional(Schema.NullOr(Schema.Union(Schema.String, Schema.Array(Schema.String)))),
    logit_bias: Schema.optional(Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.Number }))),
    tools: Schema.optional(Schema.NullOr(Schema.Array(Extra))),
    tool_choice: Schema.optional(Schema.NullOr(Schema.Union(Schema.String, Extra))),
    response_format: Schema.optional(Schema.NullOr(Extra))
  },
  Extra
).pipe(
  Schema.filter(oneEndUser, { message: () => "'user' and metadata.end_user differ; send one end user, or the same name in both.", jsonSchema: {} })
).annotations({
  identifier: "ChatCompletionRequest",
  description: "Other OpenAI fields pass through to the upstream unchecked. A body may be nested at most TOLLGATE_MAX_JSON_DEPTH (64) levels deep."
})
