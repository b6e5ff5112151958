/** Void a reservation (failed request, recovery): release the whole hold, charge nothing, at most once. */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { expect } from "vitest"
import * as Ledger from "../../../spec/ledger.ts"
import { Ledger as LedgerService } from "../../../src/services/Ledger.ts"
import { run } from "../support/runtime.ts"
import { checkInvariants, type LedgerCommand, type LedgerModel, type LedgerReal, reservationIds } from "./model.ts"

export class VoidCommand implements LedgerCommand {
  constructor(readonly pick: number) {}
  check = (m: Readonly<LedgerModel>) => m.state.reservations.size > 0
  async run(m: LedgerModel, r: LedgerReal): Promise<void> {
    const ids = reservationIds(m)
    const id = ids[this.pick % ids.length]!
    const released = await run(r.rt, Effect.flatMap(SqlClient.SqlClient, (sql) => sql.withTransaction(Effect.flatMap(LedgerService, (l) => l.release(id)))).pipe(Effect.orDie))
    const step = Ledger.voidReservation(m.state, id)
    r.coverage.hit("Void", step.outcome._tag)
    expect(released, `release(${id}) vs model ${step.outcome._tag}`).toBe(step.outcome._tag === "Voided")
    m.state = step.state
    await checkInvariants(m, r)
  }
  toString = () => `Void(#${this.pick})`
}
