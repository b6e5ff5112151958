/**
 * N identical requests with one idempotency key at once, while the upstream is slow: one upstream
 * call and one charge in all; every client gets the same bytes (the original's, replayed to the rest).
 */
import { expect } from "vitest"
import { chatBody, checkInvariants, type GatewayCommand, type GatewayModel, type GatewayReal, governanceOf, IDEMPOTENCY_KEYS, post } from "./model.ts"

export class ConcurrentSendCommand implements GatewayCommand {
  constructor(readonly tenant: number, readonly key: number, readonly prompt: number, readonly n: number, readonly delayMs: number) {}
  check = () => true as const
  async run(m: GatewayModel, r: GatewayReal): Promise<void> {
    const key = IDEMPOTENCY_KEYS[this.key]!
    const slot = `${this.tenant}/${key}`
    const before = m.exchanges.get(slot)
    // A slow upstream for the one request that reaches it (the others must never get there).
    if (before === undefined) r.upstream.pushBehavior({ delayMs: this.delayMs })
    const replies = await Promise.all(Array.from({ length: this.n }, () => post(r, this.tenant, chatBody(r, this.prompt, key))))
    if (before === undefined || before.prompt === this.prompt) {
      for (const reply of replies) expect(reply.status, reply.bytes).toBe(200)
      const bytes = new Set(replies.map((x) => x.bytes))
      expect(bytes.size, "all N clients get identical bytes").toBe(1)
      const originals = replies.filter((x) => x.headers.get("idempotent-replayed") === null)
      if (before === undefined) {
        expect(originals.length, "exactly one request ran").toBe(1)
        const g = governanceOf(replies[0]!.bytes)
        m.upstreamCalls++
        m.charges[this.tenant]!.set(g.request_id, g.credits_charged)
        m.exchanges.set(slot, { prompt: this.prompt, status: 200, bytes: replies[0]!.bytes, requestId: g.request_id })
        r.coverage.hit("ConcurrentSend", "Fresh")
      } else {
        expect(originals.length).toBe(0)
        expect(replies[0]!.bytes).toBe(before.bytes)
        r.coverage.hit("ConcurrentSend", "Replay")
      }
    } else {
      for (const reply of replies) expect(reply.status, reply.bytes).toBe(409)
      r.coverage.hit("ConcurrentSend", "Conflict")
    }
    await checkInvariants(m, r)
  }
  toString = () => `ConcurrentSend(t${this.tenant}, ${IDEMPOTENCY_KEYS[this.key]}, p${this.prompt}, ×${this.n}, ${this.delayMs}ms)`
}
