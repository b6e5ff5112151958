/** One call, alone: 200 within what was left (its output cap shrunk to fit if need be), or 402 when even one token would not fit. */
import { checkInvariants, chatBody, type BudgetCommand, type BudgetModel, type BudgetReal, noteReply, send, windowOf } from "./model.ts"

export class SendCommand implements BudgetCommand {
  constructor(readonly tenant: number, readonly prompt: number, readonly maxTokens: number | undefined) {}
  check = () => true as const
  async run(m: BudgetModel, r: BudgetReal): Promise<void> {
    const before = await windowOf(r, this.tenant)
    const reply = await send(r, this.tenant, chatBody(this.prompt, this.maxTokens))
    noteReply(m, r, this.tenant, reply, before.remaining)
    r.coverage.hit("Send", `${reply.status}${this.maxTokens === undefined ? " (cap sized)" : ""}`)
    await checkInvariants(m, r)
  }
  toString = () => `Send(t${this.tenant}, p${this.prompt}, max_tokens ${this.maxTokens ?? "—"})`
}
