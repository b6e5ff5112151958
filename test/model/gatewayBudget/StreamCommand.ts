/**
 * A streamed call, read to the end, cut by the client after some chunks, or cut by the upstream
 * (socket reset after some chunks): it settles once however it ends — delivered tokens charged,
 * nothing delivered nothing charged — or it is refused with 402 before any byte.
 */
import { expect } from "vitest"
import { checkInvariants, chatBody, type BudgetCommand, type BudgetModel, type BudgetReal, noteReply } from "./model.ts"

export type StreamEnd = { readonly _tag: "Full" } | { readonly _tag: "ClientCut"; readonly afterChunks: number } | { readonly _tag: "UpstreamCut"; readonly afterChunks: number }

export class StreamCommand implements BudgetCommand {
  constructor(readonly tenant: number, readonly prompt: number, readonly maxTokens: number | undefined, readonly end: StreamEnd) {}
  check = () => true as const
  async run(m: BudgetModel, r: BudgetReal): Promise<void> {
    if (this.end._tag === "UpstreamCut") r.upstream.pushBehavior({ resetAfterChunks: this.end.afterChunks, chunkDelayMs: 2 })
    else r.upstream.pushBehavior({ chunkDelayMs: this.end._tag === "ClientCut" ? 15 : 0 })
    const ac = new AbortController()
    const res = await fetch(`${r.gw.url}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${r.tenants[this.tenant]!.key}`, "content-type": "application/json" },
      body: JSON.stringify(chatBody(this.prompt, this.maxTokens, true)),
      signal: ac.signal
    })
    if (res.status !== 200) {
      // Refused before any byte: the one-shot behaviour was not consumed by an upstream call.
      r.upstream.reset()
      noteReply(m, r, this.tenant, { status: res.status, body: JSON.parse(await res.text()), requestId: res.headers.get("x-request-id") })
      r.coverage.hit("Stream", "402")
    } else {
      const requestId = res.headers.get("x-request-id")
      expect(requestId).not.toBeNull()
      m.streams[this.tenant]!.add(requestId!)
      const reader = res.body!.getReader()
      let chunks = 0
      try {
        for (;;) {
          const { done } = await reader.read()
          if (done) break
          chunks++
          if (this.end._tag === "ClientCut" && chunks >= this.end.afterChunks) {
            ac.abort()
            break
          }
        }
      } catch {
        // An aborted read, or the gateway ending the stream with an error event after an upstream cut.
      }
      r.coverage.hit("Stream", this.end._tag)
    }
    await checkInvariants(m, r)
  }
  toString = () => `Stream(t${this.tenant}, p${this.prompt}, max_tokens ${this.maxTokens ?? "—"}, ${this.end._tag}${"afterChunks" in this.end ? ` ${this.end.afterChunks}` : ""})`
}
