import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { type ChatRequest, GOVERNANCE_METADATA, upstreamBody } from "../../src/domain/chat.ts"

/** The rule as the contract states it, written the plain way: copy, delete, set. */
const reference = (body: Record<string, unknown>, req: Pick<ChatRequest, "capField" | "stream">, cap: number): Record<string, unknown> => {
  const out: Record<string, unknown> = { ...body }
  const md = body.metadata
  if (typeof md === "object" && md !== null && !Array.isArray(md)) {
    const rest: Record<string, unknown> = { ...md }
    for (const k of GOVERNANCE_METADATA) delete rest[k]
    if (Object.keys(rest).length === 0) delete out.metadata
    else out.metadata = rest
  }
  delete out.max_tokens
  delete out.max_completion_tokens
  out[req.capField] = cap
  const so = body.stream_options
  if (req.stream) out.stream_options = { ...(typeof so === "object" && so !== null && !Array.isArray(so) ? so : {}), include_usage: true }
  return out
}

const key = fc.oneof(
  fc.constantFrom("model", "messages", "max_tokens", "max_completion_tokens", "metadata", "stream_options", "temperature", "__proto__", "user"),
  fc.string({ maxLength: 6 })
)
const mdKey = fc.oneof(fc.constantFrom(...GOVERNANCE_METADATA, "__proto__", "trace"), fc.string({ maxLength: 6 }))
const value = fc.oneof(fc.string({ maxLength: 4 }), fc.integer(), fc.constant(null), fc.dictionary(mdKey, fc.string({ maxLength: 4 }), { maxKeys: 5 }))

describe("upstreamBody", () => {
  it("sends the client's keys in the client's order, without max_tokens, max_completion_tokens or governance metadata, with the cap set (same JSON text as copy-and-delete)", () => {
    fc.assert(
      fc.property(fc.dictionary(key, value, { maxKeys: 8 }), fc.boolean(), fc.boolean(), (raw, completion, stream) => {
        // Through JSON text, as a client's body arrives ("__proto__" an own data key).
        const body = JSON.parse(JSON.stringify(raw)) as Record<string, unknown>
        const req = { capField: completion ? "max_completion_tokens" : "max_tokens", stream } as const
        expect(JSON.stringify(upstreamBody(body, req as unknown as ChatRequest, 7))).toBe(JSON.stringify(reference(body, req, 7)))
      })
    )
  })
})
