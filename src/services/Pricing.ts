/**
 * Rate cards (docs/contract.md §4). The configured cards are frozen into the store at start-up: a version
 * that was stored before with other prices stops the gateway, because a card is never edited once a
 * charge may have used it (a price change is a new version). Charge arithmetic lives in spec/pricing.ts.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect } from "effect"
import { canonicalJson } from "../../spec/canonicalJson.ts"
import { type Prices, type RateCard, rateCardAt } from "../../spec/pricing.ts"
import { Settings } from "../domain/config.ts"

export interface PricedRoute {
  readonly card: RateCard
  readonly prices: Prices
}


export class Pricing extends Effect.Service<Pricing>()("tollgate/Pricing", {
  effect: Effect.gen(function* () {
    const settings = yield* Settings
    const sql = yield* SqlClient.SqlClient
    const cards: ReadonlyArray<RateCard> = settings.gateway.rate_cards
    const now = yield* Clock.currentTimeMillis
    for (const card of cards) {
      const prices = canonicalJson(card.prices)
      const stored = yield* sql<{ prices: string; effective_from: string }>`
        SELECT prices, effective_from FROM rate_cards WHERE version = ${card.version}`
      const row = stored[0]
      if (row === undefined) {
        yield* sql`INSERT INTO rate_cards (version, effective_from, prices, created_at)
                   VALUES (${card.version}, ${card.effective_from}, ${prices}, ${now})`
      } else if (row.prices !== prices || Date.parse(row.effective_from) !== Date.parse(card.effective_from)) {
        return yield* Effect.dieMessage(
          `rate card ${card.version} differs from the stored version; a used card is immutable, publish a new version instead`
        )
      }
    }
    /** The card and prices that apply to `route` for a request starting at `atMillis`. */
    const priceAt = (route: string, atMillis: number): PricedRoute | undefined => {
      const card = rateCardAt(cards, atMillis)
      const prices = card?.prices[route]
      return card !== undefined && prices !== undefined ? { card, prices } : undefined
    }
    /** Every rate card ever stored, frozen: what a receipt's charge is recomputed against. */
    const published = Effect.map(
      sql<{ version: string; effective_from: string; prices: string }>`SELECT version, effective_from, prices FROM rate_cards ORDER BY effective_from, version`,
      (rows): ReadonlyArray<RateCard> => rows.map((r) => ({ version: r.version, effective_from: r.effective_from, prices: JSON.parse(r.prices) as RateCard["prices"] }))
    ).pipe(Effect.orDie)

    return { priceAt, cards, published } as const
  })
}) {}
