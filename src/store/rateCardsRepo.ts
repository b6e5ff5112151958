/**
 * The Pricing service's rate cards (`rate_cards` table, src/services/Pricing.ts): published once,
 * never edited, read back whole for the audit.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** A stored card, its prices as canonical JSON. */
export interface RateCardRow {
  readonly version: string
  readonly effective_from: string
  readonly prices: string
}

/** The statements; a service runs them. */
export const makeRateCardsRepo = (sql: SqlClient.SqlClient) => ({
  /** Insert-if-absent: instances starting together race to publish the same card; one INSERT wins. */
  publish: (card: RateCardRow, now: number) =>
    sql`INSERT INTO rate_cards (version, effective_from, prices, created_at)
        VALUES (${card.version}, ${card.effective_from}, ${card.prices}, ${now}) ON CONFLICT (version) DO NOTHING`,

  /** The card stored as `version`. */
  stored: (version: string) => sql<Omit<RateCardRow, "version">>`SELECT prices, effective_from FROM rate_cards WHERE version = ${version}`,

  /** Every card ever stored, in the order they take effect. */
  all: () => sql<RateCardRow>`SELECT version, effective_from, prices FROM rate_cards ORDER BY effective_from, version`
})

export class RateCardsRepo extends Effect.Service<RateCardsRepo>()("tollgate/RateCardsRepo", {
  effect: Effect.map(SqlClient.SqlClient, makeRateCardsRepo)
}) {}
