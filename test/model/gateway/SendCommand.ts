/**
 * One chat completion, with or without an idempotency key. First use of a key: runs, one upstream
 * call, one charge. Same key and payload: the identical bytes with `Idempotent-Replayed: true`, no
 * upstream call, no charge. Same key, other payload: 409 idempotency_conflict and nothing changes.
 */
import { expect } from "vitest"
import { chatBody, checkInvariants, type GatewayCommand, type GatewayModel, type GatewayReal, governanceOf, IDEMPOTENCY_KEYS, post, PROMPTS } from "./model.ts"

export class SendCommand implements GatewayCommand {
  constructor(readonly tenant: number, readonly key: number | undefined, readonly prompt: number) {}
  check = () => true as const
  async run(m: GatewayModel, r: GatewayReal): Promise<void> {
    const key = this.key === undefined ? undefined : IDEMPOTENCY_KEYS[this.key]!
    const reply = await post(r, this.tenant, chatBody(r, this.prompt, key))
    const slot = `${this.tenant}/${key}`
    const before = key === undefined ? undefined : m.exchanges.get(slot)
    if (before === undefined) {
      expect(reply.status, reply.bytes).toBe(200)
      expect(reply.headers.get("idempotent-replayed")).toBeNull()
      const g = governanceOf(reply.bytes)
      expect(reply.headers.get("x-request-id")).toBe(g.request_id)
      m.upstreamCalls++
      m.charges[this.tenant]!.set(g.request_id, g.credits_charged)
      if (key !== undefined) m.exchanges.set(slot, { prompt: this.prompt, status: reply.status, bytes: reply.bytes, requestId: g.request_id })
      r.coverage.hit("Send", key === undefined ? "NoKey" : "Fresh")
    } else if (before.prompt === this.prompt) {
      expect({ status: reply.status, bytes: reply.bytes, replayed: reply.headers.get("idempotent-replayed"), requestId: reply.headers.get("x-request-id") }).toEqual({
        status: before.status,
        bytes: before.bytes,
        replayed: "true",
        requestId: before.requestId
      })
      r.coverage.hit("Send", "Replay")
    } else {
      expect(reply.status, reply.bytes).toBe(409)
      expect(JSON.parse(reply.bytes).error.code).toBe("idempotency_conflict")
      expect(reply.headers.get("x-should-retry")).toBe("false")
      r.coverage.hit("Send", "Conflict")
    }
    await checkInvariants(m, r)
  }
  toString = () => `Send(t${this.tenant}, ${this.key === undefined ? "no key" : IDEMPOTENCY_KEYS[this.key]}, ${JSON.stringify(PROMPTS[this.prompt])})`
}
