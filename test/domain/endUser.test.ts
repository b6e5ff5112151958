/**
 * The end user a call is made for (issue 41, DESIGN §9): the body's `user`, else `metadata.end_user`,
 * 1 to 256 characters with no control characters; both sent with different names is a 400. The hand
 * parser and the wire schema (which /openapi.json documents) give the same verdict on each case.
 */
import { Either, Schema } from "effect"
import { describe, expect, it } from "vitest"
import { parseChatRequest } from "../../src/domain/chat.ts"
import { ChatCompletionRequest } from "../../src/domain/wire/chat.ts"
import { ResponsesRequest } from "../../src/domain/wire/responses.ts"

const body = (extra: Record<string, unknown>) => ({ model: "m", messages: [{ role: "user", content: "hi" }], ...extra })
const schemaAccepts = (b: unknown) => Either.isRight(Schema.decodeUnknownEither(ChatCompletionRequest)(b))
const responsesAccepts = (b: Record<string, unknown>) => Either.isRight(Schema.decodeUnknownEither(ResponsesRequest)({ model: "m", input: "hi", ...b }))

const accepted: ReadonlyArray<readonly [string, Record<string, unknown>, string | undefined]> = [
  ["no end user", {}, undefined],
  ["user", { user: "alice" }, "alice"],
  ["metadata.end_user", { metadata: { end_user: "bob" } }, "bob"],
  ["the same name in both", { user: "carol", metadata: { end_user: "carol" } }, "carol"],
  ["256 characters, not ASCII", { user: "é".repeat(256) }, "é".repeat(256)],
  ["user null, metadata.end_user", { user: null, metadata: { end_user: "dan" } }, "dan"]
]

const refused: ReadonlyArray<readonly [string, Record<string, unknown>, string]> = [
  ["a user of 10 KB", { user: "x".repeat(10_240) }, "user"],
  ["an empty user", { user: "" }, "user"],
  ["a control character", { user: "eve\n" }, "user"],
  ["257 characters", { user: "x".repeat(257) }, "user"],
  ["an empty metadata.end_user", { metadata: { end_user: "" } }, "metadata.end_user"],
  ["two different names", { user: "alice", metadata: { end_user: "mallory" } }, "metadata.end_user"]
]

describe("the end user of a call", () => {
  it.each(accepted)("accepts %s", (_, extra, endUser) => {
    const r = parseChatRequest(body(extra))
    expect(Either.isRight(r) && r.right.endUser).toBe(Either.isRight(r) ? endUser : "refused")
    expect(schemaAccepts(body(extra))).toBe(true)
    expect(responsesAccepts(extra)).toBe(true)
  })

  it.each(refused)("refuses %s with a 400 naming the field", (_, extra, param) => {
    const r = parseChatRequest(body(extra))
    expect(Either.isLeft(r) && { error: r.left._tag, param: r.left.param }).toEqual({ error: "InvalidRequest", param })
    expect(schemaAccepts(body(extra))).toBe(false)
    expect(responsesAccepts(extra)).toBe(false)
  })
})
