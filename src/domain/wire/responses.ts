/**
 * The Responses API request (POST /v1/responses) as the wire carries it: what `/openapi.json`
 * documents (re-exported by src/http/schemas.ts) and exactly what the governed path accepts — the
 * translation to a chat body (`responsesToChat`, src/services/surfaces/responses.ts) and then the
 * chat parser (src/domain/chat.ts). test/domain/responsesParser.property.test.ts holds the two to the
 * same verdict and the same governed fields on generated bodies.
 */
import { Schema } from "effect"
import { EndUser, Extra, Metadata, oneEndUser } from "./chat.ts"

/** A required field that may hold any JSON value, null included (Schema.Unknown alone lets the key be missing). */
const Present = Schema.Unknown.pipe(Schema.filter((v) => v !== undefined, { message: () => "is missing" }))

export const InputTextPart = Schema.Struct({ type: Schema.Literal("input_text", "output_text", "text"), text: Schema.String }, Extra).annotations({
  identifier: "InputTextPart",
  description: "Text only in the connected beta: images, audio and files are refused (422)."
})

export const InputItem = Schema.Union(
  Schema.Struct(
    {
      type: Schema.optional(Schema.NullOr(Schema.Literal("message"))),
      role: Schema.Literal("user", "assistant", "system", "developer"),
      content: Schema.Union(Schema.String, Schema.Array(InputTextPart))
    },
    Extra
  ),
  Schema.Struct({ type: Schema.Literal("function_call"), call_id: Schema.String, name: Schema.String, arguments: Schema.String }, Extra),
  Schema.Struct({ type: Schema.Literal("function_call_output"), call_id: Schema.String, output: Present }, Extra)
).annotations({ identifier: "InputItem", description: "A message (type message or none), a function call, or a function call's output." })

/** Only function tools (others are 422). */
const FunctionTool = Schema.Struct({ type: Schema.Literal("function") }, Extra)

const fields = {
  model: Schema.String.pipe(Schema.minLength(1)).annotations({ description: "A route name, or `auto`." }),
  input: Schema.Union(Schema.String, Schema.Array(InputItem)),
  instructions: Schema.optional(Schema.NullOr(Schema.String)),
  max_output_tokens: Schema.optional(Schema.NullOr(Schema.Int.pipe(Schema.greaterThanOrEqualTo(1)))),
  temperature: Schema.optional(Schema.NullOr(Schema.Number)),
  top_p: Schema.optional(Schema.NullOr(Schema.Number)),
  metadata: Schema.optional(Schema.NullOr(Metadata)),
  stream: Schema.optional(Schema.NullOr(Schema.Boolean)),
  user: Schema.optional(Schema.NullOr(EndUser)),
  parallel_tool_calls: Schema.optional(Schema.NullOr(Schema.Boolean)),
  tool_choice: Schema.optional(Schema.NullOr(Schema.Union(Schema.String, Extra))),
  tools: Schema.optional(Schema.NullOr(Schema.Array(FunctionTool))),
  modalities: Schema.optional(Schema.NullOr(Schema.Array(Schema.Literal("text")))),
  // Tollgate keeps no conversation: send the whole input (422 otherwise).
  previous_response_id: Schema.optional(Schema.Null),
  conversation: Schema.optional(Schema.Null)
}

export const ResponsesRequest = Schema.Struct(fields, Extra)
  .pipe(
    Schema.filter((b) => typeof b.input === "string" || b.input.length > 0 || typeof b.instructions === "string", {
      message: () => "'input' must contain at least one item (or instructions be given).",
      jsonSchema: {}
    })
  )
  .pipe(Schema.filter(oneEndUser, { message: () => "'user' and metadata.end_user differ; send one end user, or the same name in both.", jsonSchema: {} }))
  .annotations({
    identifier: "ResponsesRequest",
    description: "Other fields pass through to the upstream unchecked where the chat completion has them (text.format becomes response_format). An empty input array needs instructions."
  })
