/**
 * Pricing: configured rate cards are frozen into the store at start-up (a stored version whose
 * prices or start changed stops the gateway), and priceAt picks the card in force at an instant.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Option } from "effect"
import { type GatewayFile, type RateCardConfig } from "../../src/domain/config.ts"
import { Pricing } from "../../src/services/Pricing.ts"
import { settingsLayer, storeLayer } from "./layers.ts"

const card = (version: string, effective_from: string, input: number, output = 2 * input): RateCardConfig => ({
  version,
  effective_from,
  prices: { demo: { input, output } }
})

const gatewayWith = (...rate_cards: ReadonlyArray<RateCardConfig>): GatewayFile => ({
  providers: { demo: { type: "demo" } },
  routes: [{ name: "demo", provider: "demo", upstream_model: "demo-1", max_output_tokens: 64, auto: true }],
  rate_cards
})

const JAN = card("rc_2026-01", "2026-01-01T00:00:00Z", 100)
const MAR = card("rc_2026-03", "2026-03-01T00:00:00Z", 200)

/**
 * Start Pricing against the store in context, as a gateway start with these cards would.
 * Each call is a fresh build (a "restart") over the same database.
 */
const startWith = (...cards: ReadonlyArray<RateCardConfig>) =>
  Effect.exit(Effect.scoped(Layer.build(Pricing.Default.pipe(Layer.provide(settingsLayer({ gateway: gatewayWith(...cards) }))))))

const dieMessage = (exit: Exit.Exit<unknown, unknown>): string | undefined =>
  Exit.isFailure(exit) ? Option.getOrUndefined(Option.map(Cause.dieOption(exit.cause), (d) => String((d as Error).message ?? d))) : undefined

describe("Pricing start-up: a stored rate card is immutable", () => {
  it.effect("the first start stores the cards; a restart with the same cards is fine", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      expect(Exit.isSuccess(yield* startWith(JAN, MAR))).toBe(true)
      const rows = yield* sql<{ version: string; prices: string }>`SELECT version, prices FROM rate_cards ORDER BY version`
      expect(rows.map((r) => r.version)).toEqual(["rc_2026-01", "rc_2026-03"])
      expect(JSON.parse(rows[0]!.prices)).toEqual({ demo: { input: 100, output: 200 } })
      expect(Exit.isSuccess(yield* startWith(JAN, MAR))).toBe(true)
      // Dropping a card from the config, or adding a new version, is allowed.
      expect(Exit.isSuccess(yield* startWith(MAR, card("rc_2026-06", "2026-06-01T00:00:00Z", 300)))).toBe(true)
    }).pipe(Effect.provide(storeLayer())))

  it.effect("a changed price under a stored version dies and stores nothing new", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      expect(Exit.isSuccess(yield* startWith(JAN))).toBe(true)
      const changed = yield* startWith(card("rc_2026-01", "2026-01-01T00:00:00Z", 101))
      expect(dieMessage(changed)).toMatch(/rate card rc_2026-01 differs from the stored version/)
      const stored = yield* sql<{ prices: string }>`SELECT prices FROM rate_cards WHERE version = 'rc_2026-01'`
      expect(JSON.parse(stored[0]!.prices)).toEqual({ demo: { input: 100, output: 200 } })
    }).pipe(Effect.provide(storeLayer())))

  it.effect("a moved effective_from under a stored version dies; the same instant written differently does not", () =>
    Effect.gen(function* () {
      expect(Exit.isSuccess(yield* startWith(JAN))).toBe(true)
      expect(dieMessage(yield* startWith(card("rc_2026-01", "2026-01-02T00:00:00Z", 100)))).toMatch(/differs from the stored version/)
      expect(Exit.isSuccess(yield* startWith(card("rc_2026-01", "2026-01-01T01:00:00+01:00", 100)))).toBe(true)
    }).pipe(Effect.provide(storeLayer())))

  it.effect("price key order does not count as a change", () =>
    Effect.gen(function* () {
      expect(Exit.isSuccess(yield* startWith(JAN))).toBe(true)
      const reordered: RateCardConfig = { ...JAN, prices: { demo: { output: 200, input: 100 } } }
      expect(Exit.isSuccess(yield* startWith(reordered))).toBe(true)
    }).pipe(Effect.provide(storeLayer())))
})

describe("Pricing.priceAt", () => {
  // Cards deliberately listed out of order: the choice is by time, not by position.
  const Live = Pricing.Default.pipe(Layer.provide(storeLayer({ gateway: gatewayWith(MAR, JAN) })))

  it.effect("picks the latest card whose effective_from is at or before the instant", () =>
    Effect.gen(function* () {
      const pricing = yield* Pricing
      expect(pricing.priceAt("demo", Date.parse("2025-12-31T23:59:59.999Z"))).toBeUndefined()
      expect(pricing.priceAt("demo", Date.parse("2026-01-01T00:00:00Z"))).toEqual({ card: JAN, prices: { input: 100, output: 200 } })
      expect(pricing.priceAt("demo", Date.parse("2026-02-28T23:59:59.999Z"))?.card.version).toBe("rc_2026-01")
      expect(pricing.priceAt("demo", Date.parse("2026-03-01T00:00:00Z"))).toEqual({ card: MAR, prices: { input: 200, output: 400 } })
      expect(pricing.priceAt("demo", Date.parse("2030-01-01T00:00:00Z"))?.card.version).toBe("rc_2026-03")
    }).pipe(Effect.provide(Live)))

  it.effect("a route the card does not price has no price", () =>
    Effect.gen(function* () {
      const pricing = yield* Pricing
      expect(pricing.priceAt("gpt-unknown", Date.parse("2026-02-01T00:00:00Z"))).toBeUndefined()
      expect(pricing.cards.map((c) => c.version)).toEqual(["rc_2026-03", "rc_2026-01"])
    }).pipe(Effect.provide(Live)))
})
