/**
 * Abandon a call through the store port (failed request, nothing charged): void the whole hold, fail
 * the request — at most once; abandoning a resolved hold changes nothing.
 */
import { Effect } from "effect"
import * as Ledger from "../../../spec/ledger.ts"
import { ChatStore } from "../../../src/store/ChatStore.ts"
import { abandonArgs } from "../../support/portArgs.ts"
import { run } from "../support/runtime.ts"
import { checkInvariants, type LedgerCommand, type LedgerModel, type LedgerReal, reservationIds } from "./model.ts"

export class VoidCommand implements LedgerCommand {
  constructor(readonly pick: number) {}
  check = (m: Readonly<LedgerModel>) => m.state.reservations.size > 0
  async run(m: LedgerModel, r: LedgerReal): Promise<void> {
    const ids = reservationIds(m)
    const id = ids[this.pick % ids.length]!
    await run(r.rt, Effect.flatMap(ChatStore, (s) => s.abandon(abandonArgs(r.holds.get(id)!, { now: Date.now() }))))
    const step = Ledger.voidReservation(m.state, id)
    r.coverage.hit("Void", step.outcome._tag)
    m.state = step.state
    await checkInvariants(m, r)
  }
  toString = () => `Void(#${this.pick})`
}
