/** N calls of one tenant at once, racing for its last Credits: each is a 200 or a 402, never an overspend. */
import { checkInvariants, chatBody, type BudgetCommand, type BudgetModel, type BudgetReal, noteReply, send } from "./model.ts"

export class ConcurrentSendsCommand implements BudgetCommand {
  constructor(readonly tenant: number, readonly prompts: ReadonlyArray<number>, readonly maxTokens: number | undefined) {}
  check = () => true as const
  async run(m: BudgetModel, r: BudgetReal): Promise<void> {
    const replies = await Promise.all(this.prompts.map((p) => send(r, this.tenant, chatBody(p, this.maxTokens))))
    for (const reply of replies) noteReply(m, r, this.tenant, reply)
    const ok = replies.filter((x) => x.status === 200).length
    r.coverage.hit("ConcurrentSends", ok === replies.length ? "All200" : ok === 0 ? "All402" : "Mixed")
    await checkInvariants(m, r)
  }
  toString = () => `ConcurrentSends(t${this.tenant}, [${this.prompts}], max_tokens ${this.maxTokens ?? "—"})`
}
