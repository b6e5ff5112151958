/**
 * Rate cards (docs/contract.md §4). The configured cards are frozen into the store at start-up: a version
 * that was stored before with other prices stops the gateway, because a card is never edited once a
 * charge may have used it (a price change is a new version). Charge arithmetic lives in spec/pricing.ts.
 */
import { Clock, Effect } from "effect"
import { canonicalJson } from "../../spec/canonicalJson.ts"
import { type Prices, type RateCard, rateCardAt } from "../../spec/pricing.ts"
import { Settings } from "../domain/config.ts"
import { RateCardsRepo } from "../store/rateCardsRepo.ts"

export interface PricedRoute {
  readonly card: RateCard
  readonly prices: Prices
}


export class Pricing extends Effect.Service<Pricing>()("tollgate/Pricing", {
  effect: Effect.gen(function* () {
    const settings = yield* Settings
    const repo = yield* RateCardsRepo
    const cards: ReadonlyArray<RateCard> = settings.gateway.rate_cards
    const now = yield* Clock.currentTimeMillis
    for (const card of cards) {
      const prices = canonicalJson(card.prices)
      // Insert-if-absent, then compare what is stored: instances starting together on one database
      // race to publish the same card; one INSERT wins, and every instance checks its card against it.
      yield* repo.publish({ version: card.version, effective_from: card.effective_from, prices }, now)
      const stored = yield* repo.stored(card.version)
      const row = stored[0]!
      if (row.prices !== prices || Date.parse(row.effective_from) !== Date.parse(card.effective_from)) {
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
      repo.all(),
      (rows): ReadonlyArray<RateCard> => rows.map((r) => ({ version: r.version, effective_from: r.effective_from, prices: JSON.parse(r.prices) as RateCard["prices"] }))
    ).pipe(Effect.orDie)

    return { priceAt, cards, published } as const
  }),
  dependencies: [RateCardsRepo.Default]
}) {}
