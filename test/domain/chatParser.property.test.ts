/**
 * The hand parser of the governed path (src/domain/chat.ts `parseChatRequest`, kept by hand: see
 * below) agrees with the wire schema that /openapi.json documents (src/domain/wire/chat.ts
 * `ChatCompletionRequest`) on every body: the same verdict (accepted or refused) and, when accepted,
 * the same request. The schema's side reads its decoded body the way the contract words it
 * (`requestOfDecoded` below, written from docs/contract.md §3, not from the parser).
 *
 * Bodies are JSON, as the server receives them: generated from the schema itself (Effect's
 * Arbitrary), then broken at a random place (a wrong type, a boundary value, a key removed), and built
 * field by field from values on both sides of each rule. A planted disagreement (a parser that accepts
 * `max_tokens: 0`, one that names the wrong cap field) is shown to be found.
 *
 * Why the parser stays rather than the decoder: its refusals are the wire's (each names its field
 * as OpenAI does, `messages[0].content`, and tells 400 from 422), which a decode failure does not
 * say; and it is ≈ 7× cheaper — 1.1 µs against 7.9 µs for a typical body (system + user message,
 * max_tokens, metadata) on the bench box (AMD EPYC, 2 cores), the `speed` test below, run with
 * TOLLGATE_DEEP=1. The decoder also drops a client's own `__proto__` key (see the last test).
 */
import { Arbitrary, Either, FastCheck as fc, Schema } from "effect"
import { describe, expect, it } from "vitest"
import { type ChatRequest, parseChatRequest } from "../../src/domain/chat.ts"
import { ChatCompletionRequest } from "../../src/domain/wire/chat.ts"

const DEEP = process.env.TOLLGATE_DEEP === "1"
const RUNS = DEEP ? 20_000 : 2_000

type Body = typeof ChatCompletionRequest.Type

/** What the governed path reads from an accepted body, by the contract: the cap is max_completion_tokens, else max_tokens. */
const requestOfDecoded = (b: Body): ChatRequest => {
  const cap = b.max_completion_tokens ?? b.max_tokens ?? undefined
  return {
    model: b.model,
    messages: b.messages,
    stream: b.stream === true,
    includeUsage: b.stream_options?.include_usage === true,
    requestedMaxTokens: cap,
    capField: b.max_completion_tokens !== undefined && b.max_completion_tokens !== null ? "max_completion_tokens" : "max_tokens",
    metadata: b.metadata ?? {},
    tools: b.tools,
    // The end user: `user`, else metadata.end_user (the schema refuses two different names).
    endUser: b.user ?? b.metadata?.end_user ?? undefined
  }
}

const decode = Schema.decodeUnknownEither(ChatCompletionRequest)

/** The schema's reading of a body: the request, or a refusal. */
const bySchema = (body: unknown): Either.Either<ChatRequest, unknown> => Either.map(decode(body), requestOfDecoded)

type Parser = (body: unknown) => Either.Either<ChatRequest, unknown>

/** `body` as the server gets it: through JSON (no undefined, no NaN, no -0). */
const wire = (value: unknown): unknown => JSON.parse(JSON.stringify(value))

const tricky = fc.constantFrom<unknown>(
  null, 0, 1, -1, 1.5, 2, 2 ** 53, "", "text", "refusal", "image_url", "assistant", "user", "x", true, false,
  [], {}, ["text"], ["audio"], ["x", 1], { type: "text" }, { type: "text", text: "t" }, { type: "refusal", refusal: "r" },
  { type: "text", refusal: "r" }, { type: "image_url", image_url: { url: "u" } }, [{ type: "text", text: "t" }], { include_usage: true }, { k: "v" }, { k: 1 }
)

type Path = ReadonlyArray<string | number>

const pathsOf = (value: unknown, at: Path = [], out: Array<Path> = []): Array<Path> => {
  out.push(at)
  if (Array.isArray(value)) value.forEach((v, i) => pathsOf(v, [...at, i], out))
  else if (value !== null && typeof value === "object") for (const [k, v] of Object.entries(value)) pathsOf(v, [...at, k], out)
  return out
}

/** A copy of `body` with the value at `path` replaced, or removed (`remove`). */
const changedAt = (body: unknown, path: Path, value: unknown, remove: boolean): unknown => {
  if (path.length === 0) return remove ? {} : value
  const copy: any = structuredClone(body)
  let node = copy
  for (const step of path.slice(0, -1)) node = node[step]
  const last = path.at(-1)!
  if (!remove) node[last] = value
  else if (Array.isArray(node)) node.splice(Number(last), 1)
  else delete node[last]
  return copy
}

/** Bodies generated from the schema: valid ones. */
const valid = Arbitrary.make(ChatCompletionRequest).map(wire)

/** Valid bodies broken at one place. */
const broken = fc.tuple(valid, fc.nat(), tricky, fc.boolean()).map(([body, pick, value, remove]) => {
  const paths = pathsOf(body)
  return wire(changedAt(body, paths[pick % paths.length]!, value, remove))
})

/** A value that keeps its rule mostly, and breaks it now and then (so that a body gets past the earlier rules). */
const mostly = <A,>(kept: fc.Arbitrary<A>, broken: fc.Arbitrary<unknown> = tricky) => fc.oneof({ arbitrary: kept, weight: 8 }, { arbitrary: broken, weight: 1 })
const nullable = <A,>(kept: fc.Arbitrary<A>) => fc.oneof({ arbitrary: kept, weight: 4 }, { arbitrary: fc.constant(null), weight: 1 })

const text = fc.constantFrom("hi", "", "Say something.")
const part = mostly(
  fc.record({ type: mostly(fc.constantFrom("text", "refusal"), fc.constantFrom<unknown>("image_url", "input_audio", "file", 1, null)), text: mostly(text), refusal: mostly(text) }, { requiredKeys: ["type"] })
)
const content = fc.oneof({ arbitrary: text, weight: 4 }, { arbitrary: fc.array(part, { minLength: 1, maxLength: 3 }), weight: 3 }, { arbitrary: fc.constant(null), weight: 1 }, { arbitrary: tricky, weight: 1 })
const message = mostly(
  fc.record(
    { role: mostly(fc.constantFrom("system", "developer", "user", "assistant", "tool", "function"), fc.constantFrom<unknown>("bot", 3, null)), content, name: text, tool_calls: fc.constant([]) },
    { requiredKeys: ["role", "content"] }
  ),
  fc.oneof(tricky, fc.constantFrom({ role: "assistant" }, { role: "user" }, { role: "assistant", tool_calls: [] }))
)
const cap = mostly(fc.constantFrom(1, 2, 256, 2 ** 53 - 1), fc.constantFrom<unknown>(0, -5, 1.5, 2 ** 53, "10", true, []))

/** Bodies built field by field from values on both sides of each rule, each broken now and then. */
const fieldByField = fc.record(
  {
    model: mostly(fc.constantFrom("gpt-test", "auto"), fc.constantFrom<unknown>("", 1, null, [])),
    messages: mostly(fc.array(message, { minLength: 1, maxLength: 3 }), fc.constantFrom<unknown>([], {}, "hi", null)),
    metadata: mostly(nullable(fc.dictionary(fc.constantFrom("project_id", "environment", "idempotency_key", "max_credits", "x"), mostly(text)))),
    max_tokens: nullable(cap),
    max_completion_tokens: nullable(cap),
    stream: mostly(nullable(fc.boolean())),
    stream_options: mostly(nullable(fc.record({ include_usage: mostly(fc.boolean()), extra: tricky }, { requiredKeys: [] }))),
    modalities: mostly(nullable(fc.array(mostly(fc.constant("text"), fc.constantFrom<unknown>("audio", 1)), { maxLength: 2 }))),
    audio: mostly(fc.constant(null), fc.constantFrom<unknown>({}, { voice: "x" }, "x", false)),
    temperature: mostly(nullable(fc.double({ noNaN: true, noDefaultInfinity: true }))),
    seed: mostly(nullable(fc.integer())),
    n: mostly(nullable(fc.constant(1))),
    logprobs: mostly(nullable(fc.boolean())),
    top_logprobs: mostly(nullable(fc.nat(20))),
    user: mostly(nullable(text)),
    stop: mostly(nullable(fc.oneof(text, fc.array(text, { maxLength: 2 })))),
    logit_bias: mostly(nullable(fc.dictionary(fc.constantFrom("50256", "1"), mostly(fc.integer({ min: -100, max: 100 }))))),
    tools: mostly(nullable(fc.array(mostly(fc.constant({ type: "function", function: { name: "f" } })), { maxLength: 2 }))),
    tool_choice: mostly(nullable(fc.oneof(fc.constantFrom("auto", "none"), fc.constant({ type: "function", function: { name: "f" } })))),
    response_format: mostly(nullable(fc.constant({ type: "json_object" }))),
    unknown_field: tricky
  },
  { requiredKeys: ["model", "messages"] }
).map(wire)

const bodies = fc.oneof({ arbitrary: valid, weight: 2 }, { arbitrary: broken, weight: 4 }, { arbitrary: fieldByField, weight: 4 }, { arbitrary: fc.jsonValue(), weight: 1 })

/** Whether an object of `value` has an own `__proto__` key (JSON.parse makes one from `"__proto__": …`). */
const hasOwnProtoKey = (value: unknown): boolean =>
  value !== null && typeof value === "object" && (Object.hasOwn(value, "__proto__") || Object.values(value).some(hasOwnProtoKey))

/**
 * The property, for any parser: the same verdict as the schema, and the same request when both
 * accept. A body with an own `__proto__` key is held to the verdict only: the schema's decoder
 * assigns that key instead of defining it, so its copy loses it, where the parser (and the body sent
 * upstream, docs/decisions/0015) keep it as data — tested on its own below.
 */
const agreesWithSchema = (parse: Parser) =>
  fc.property(bodies, (body) => {
    const byParser = parse(body)
    const bySchemaNow = bySchema(body)
    expect({ body, accepted: Either.isRight(byParser) }).toEqual({ body, accepted: Either.isRight(bySchemaNow) })
    if (Either.isRight(byParser) && Either.isRight(bySchemaNow) && !hasOwnProtoKey(body)) expect(byParser.right).toStrictEqual(bySchemaNow.right)
  })

describe("the chat request parser and the wire schema", () => {
  it("accept and refuse the same bodies, and read the same request from an accepted one", () => {
    fc.assert(agreesWithSchema(parseChatRequest), { numRuns: RUNS })
  })

  it("the generated bodies are both accepted and refused, at every rule (not a property that cannot fail)", () => {
    const sample = fc.sample(bodies, { numRuns: 2_000, seed: 39 })
    const accepted = sample.filter((b) => Either.isRight(parseChatRequest(b))).length
    expect(accepted).toBeGreaterThan(200)
    expect(sample.length - accepted).toBeGreaterThan(200)
    const refusedAt = new Set(sample.flatMap((b) => Either.match(parseChatRequest(b), { onLeft: (e) => [String(e.param).replace(/\[\d+\]/g, "[]")], onRight: () => [] })))
    for (const param of ["model", "messages", "messages[].role", "messages[].content", "messages[].content[]", "messages[].content[].type", "messages[].content[].text", "max_tokens", "max_completion_tokens", "stream", "stream_options", "modalities", "audio", "metadata", "n", "temperature", "tools"]) {
      expect(refusedAt, param).toContain(param)
    }
  })

  it("finds a planted disagreement: a parser that accepts max_tokens 0, one that names the wrong cap field", () => {
    const acceptsZero: Parser = (b) => (b !== null && typeof b === "object" && (b as { max_tokens?: unknown }).max_tokens === 0 ? parseChatRequest({ ...b, max_tokens: null }) : parseChatRequest(b))
    expect(fc.check(agreesWithSchema(acceptsZero), { numRuns: RUNS, seed: 39 }).failed).toBe(true)
    const wrongCapField: Parser = (b) => Either.map(parseChatRequest(b), (r) => ({ ...r, capField: "max_tokens" as const }))
    expect(fc.check(agreesWithSchema(wrongCapField), { numRuns: RUNS, seed: 39 }).failed).toBe(true)
  })

  it("a client's own __proto__ key: both accept it; the parser keeps it as data, the schema's decoder drops it", () => {
    const body = JSON.parse('{"model":"m","messages":[{"role":"user","content":"hi","__proto__":{"x":1}}],"metadata":{"__proto__":"v"}}')
    const byParser = Either.getOrThrow(parseChatRequest(body))
    const bySchemaNow = Either.getOrThrow(bySchema(body))
    expect(Object.hasOwn(byParser.messages[0]!, "__proto__")).toBe(true)
    expect(Object.hasOwn(byParser.metadata, "__proto__")).toBe(true)
    expect(Object.hasOwn(bySchemaNow.messages[0]!, "__proto__")).toBe(false)
  })

  it.runIf(DEEP)("speed: the parser and the schema's decoder on a typical body (logged)", () => {
    const body = wire({
      model: "gpt-test",
      messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Say hello in five words." }],
      max_tokens: 64,
      stream: false,
      stream_options: null,
      metadata: { project_id: "prj_x", idempotency_key: "k-1" }
    })
    const time = (f: () => unknown) => {
      for (let i = 0; i < 20_000; i++) f()
      const n = 200_000
      const t = performance.now()
      for (let i = 0; i < n; i++) f()
      return ((performance.now() - t) * 1000) / n
    }
    const parser = time(() => parseChatRequest(body))
    const schema = time(() => bySchema(body))
    console.log(`chat body: parser ${parser.toFixed(2)} µs, schema decoder ${schema.toFixed(2)} µs (${(schema / parser).toFixed(1)}×)`)
    expect(Either.isRight(bySchema(body))).toBe(true)
  })
})
