/**
 * A request the HttpApi's schemas refuse (src/http/errors.ts `decodeFailure`): an OpenAI-shaped
 * 400 invalid_request_error whose `param` is the path of the first issue, never the platform's own
 * HttpApiDecodeError body; and every domain error is recognised as one the wire can carry.
 */
import { HttpApiError } from "@effect/platform"
import { Effect, Either, Schema } from "effect"
import { describe, expect, it } from "vitest"
import * as E from "../../src/domain/errors.ts"
import { decodeFailure, wireError } from "../../src/http/errors.ts"

const refused = (schema: Schema.Schema<any, any>, input: unknown): HttpApiError.HttpApiDecodeError => {
  const result = Schema.decodeUnknownEither(schema)(input)
  if (Either.isRight(result)) throw new Error("the input was expected to be refused")
  return Effect.runSync(HttpApiError.HttpApiDecodeError.fromParseError(result.left))
}

describe("a decode failure on the wire", () => {
  const Patch = Schema.Struct({ name: Schema.optional(Schema.String), rate_limit: Schema.optional(Schema.Struct({ burst: Schema.Int })) })

  it("names the refused field's path as param, in a 400 invalid_request_error", () => {
    const wire = wireError(decodeFailure(refused(Patch, { rate_limit: { burst: "lots" } })))
    expect(wire).toMatchObject({ status: 400, type: "invalid_request_error", param: "rate_limit.burst" })
    expect(wire.message).toMatch(/^Invalid rate_limit\.burst: /)
    expect(wire.message).not.toContain("HttpApiDecodeError")
  })

  it("has no param when the whole value is refused", () => {
    const wire = wireError(decodeFailure(refused(Patch, "not an object")))
    expect(wire).toMatchObject({ status: 400, param: null })
    expect(wire.message).toMatch(/^Invalid request: /)
  })

  it("isTollgateError knows every class and nothing else", () => {
    expect(E.isTollgateError(new E.InvalidRequest({ message: "m", param: null }))).toBe(true)
    expect(E.isTollgateError(new E.AdminNotFound({ message: "m" }))).toBe(true)
    expect(E.isTollgateError(new Error("boom"))).toBe(false)
    expect(E.isTollgateError({ _tag: "InvalidRequest", message: "m", param: null })).toBe(false)
    // A tag that is a key of every object, not of the table: no class.
    expect(E.isTollgateError({ _tag: "constructor" })).toBe(false)
    // Every class in the table, by a constructed instance (fields unchecked: `true` skips the schema's
    // validation), whose tag is its class's own — so a table key that is not its class's tag fails here.
    for (const [tag, errorClass] of Object.entries(E.errorClasses)) {
      const instance = new (errorClass as unknown as new (props: object, disableValidation: boolean) => { readonly _tag: string })({}, true)
      expect(instance._tag).toBe(tag)
      expect(E.isTollgateError(instance)).toBe(true)
    }
  })
})
