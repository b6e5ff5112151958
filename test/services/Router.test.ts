/**
 * Router: which routes may serve a model name, and how a call is retried, failed over and guarded by
 * the per-route circuit breaker. Upstream behaviour comes from the real-HTTP mock upstream.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { afterAll, afterEach, beforeAll, describe, expect, it, layer } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Layer, TestClock } from "effect"
import type { GatewayFile, GatewaySettings } from "../../src/domain/config.ts"
import { type Route, Router } from "../../src/services/Router.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { settingsLayer } from "./layers.ts"

const routerLayer = (gateway: GatewayFile, overrides: Partial<GatewaySettings> = {}) =>
  Router.Default.pipe(Layer.provide(Layer.mergeAll(NodeHttpClient.layerUndici, settingsLayer({ gateway, ...overrides }))))

const names = (routes: ReadonlyArray<Route>) => routes.map((r) => r.name)
const PRICE = { input: 1, output: 1 }

describe("Router.candidates", () => {
  const demoGateway: GatewayFile = {
    providers: { demo: { type: "demo" } },
    routes: [
      { name: "open-auto", provider: "demo", upstream_model: "d1", max_output_tokens: 64, auto: true },
      { name: "only-x", provider: "demo", upstream_model: "d2", max_output_tokens: 64, auto: true, projects: ["prj_x"] },
      { name: "named-only", provider: "demo", upstream_model: "d3", max_output_tokens: 64, auto: false },
      { name: "orphan", provider: "missing", upstream_model: "d4", max_output_tokens: 64, auto: true }
    ],
    rate_cards: []
  }

  layer(routerLayer(demoGateway))("with a demo provider", (it) => {
    it.effect("auto is every auto route the project may use, in configured order", () =>
      Effect.gen(function* () {
        const router = yield* Router
        expect(names(yield* router.candidates("auto", "prj_x"))).toEqual(["open-auto", "only-x"])
        expect(names(yield* router.candidates("auto", "prj_y"))).toEqual(["open-auto"])
        // No project given (internal callers): no allowlist applies.
        expect(names(yield* router.candidates("auto"))).toEqual(["open-auto", "only-x"])
      }))

    it.effect("a named route is itself, auto or not", () =>
      Effect.gen(function* () {
        const router = yield* Router
        expect(names(yield* router.candidates("named-only", "prj_y"))).toEqual(["named-only"])
        expect(names(yield* router.candidates("only-x", "prj_x"))).toEqual(["only-x"])
      }))

    it.effect("an unknown name, a route of another project, or a route with no provider is not retryable", () =>
      Effect.gen(function* () {
        const router = yield* Router
        for (const model of ["gpt-nope", "only-x", "orphan"]) {
          const e = yield* Effect.flip(router.candidates(model, "prj_y"))
          expect(e._tag).toBe("RouteUnavailable")
          expect(e.retryable).toBe(false)
          expect(e.message).toBe(`The model '${model}' is not a route available to this project. Available: auto, open-auto, named-only.`)
        }
      }))

    it.effect("available lists what the project may use; routes lists what is configured with a provider", () =>
      Effect.gen(function* () {
        const router = yield* Router
        expect(names(yield* router.available("prj_y"))).toEqual(["open-auto", "named-only"])
        expect(names(yield* router.available("prj_x"))).toEqual(["open-auto", "only-x", "named-only"])
        expect(names(router.routes)).toEqual(["open-auto", "only-x", "named-only"])
      }))

    it.effect("a demo route serves a completion and records one ok attempt", () =>
      Effect.gen(function* () {
        const router = yield* Router
        const chain = yield* router.candidates("named-only")
        const served = yield* router.complete(chain, () => ({ messages: [{ role: "user", content: "ping" }] }))
        expect(served.route.name).toBe("named-only")
        expect(served.attempts).toEqual([{ route: "named-only", provider: "demo", outcome: "ok", duration_ms: 0 }])
        expect(served.value.json).toMatchObject({ object: "chat.completion", model: "d3" })
        expect(served.value.raw).toContain('You said: \\"ping\\"')
      }))

    it.effect("a demo reply is dated by the Clock, streamed or not", () =>
      Effect.gen(function* () {
        const at = Date.UTC(2031, 0, 2, 3, 4, 5)
        yield* TestClock.setTime(at)
        const router = yield* Router
        const chain = yield* router.candidates("named-only")
        const served = yield* router.complete(chain, () => ({ messages: [{ role: "user", content: "when?" }] }))
        expect(served.value.json.created).toBe(at / 1000)
        const opened = yield* Effect.scoped(
          Effect.gen(function* () {
            const stream = yield* router.openStream(chain, () => ({ messages: [{ role: "user", content: "when?" }], stream: true }))
            const first = yield* Effect.promise(() => stream.value[Symbol.asyncIterator]().next())
            return first.done === true ? undefined : (JSON.parse(first.value[0]!) as { created: number })
          })
        )
        expect(opened?.created).toBe(at / 1000)
      }))
  })

  it.effect("with no auto route configured, auto is unavailable and not retryable", () =>
    Effect.gen(function* () {
      const e = yield* Effect.flip(Effect.flatMap(Router, (r) => r.candidates("auto")))
      expect(e).toMatchObject({ _tag: "RouteUnavailable", retryable: false, message: "No route is configured for model auto." })
    }).pipe(
      Effect.provide(
        routerLayer({
          providers: { demo: { type: "demo" } },
          routes: [{ name: "manual", provider: "demo", upstream_model: "d", max_output_tokens: 8, auto: false }],
          rate_cards: []
        })
      )
    ))
})

describe("Router against a real upstream", () => {
  let mock: MockUpstream
  beforeAll(async () => {
    mock = await startMockUpstream()
  })
  afterEach(() => mock.reset())
  afterAll(() => mock.close())

  /** Two auto routes on the mock (primary first) and one named-only route. */
  const gateway = (): GatewayFile => ({
    providers: { mock: { type: "openai", base_url: mock.url } },
    routes: [
      { name: "primary", provider: "mock", upstream_model: "up-primary", max_output_tokens: 64, auto: true },
      { name: "secondary", provider: "mock", upstream_model: "up-secondary", max_output_tokens: 64, auto: true },
      { name: "flaky", provider: "mock", upstream_model: "up-flaky", max_output_tokens: 64, auto: false }
    ],
    rate_cards: [{ version: "rc_t", effective_from: "2020-01-01T00:00:00Z", prices: { primary: PRICE, secondary: PRICE, flaky: PRICE } }]
  })
  const body = () => ({ messages: [{ role: "user", content: "hello" }] })
  const call = (model: string) =>
    Effect.gen(function* () {
      const router = yield* Router
      const chain = yield* router.candidates(model)
      return yield* router.complete(chain, body)
    })
  const failedCall = (model: string) =>
    Effect.gen(function* () {
      const router = yield* Router
      return yield* Effect.flip(router.complete(yield* router.candidates(model), body))
    })
  const outcomes = (attempts: ReadonlyArray<{ route: string; outcome: string; status?: number | undefined }>) =>
    attempts.map((a) => `${a.route}:${a.outcome}${a.status === undefined ? "" : `:${a.status}`}`)

  it.live("a retryable failure is retried on the same route after a backoff", () =>
    Effect.gen(function* () {
      mock.pushBehavior({ status: 500 })
      const served = yield* call("primary")
      expect(served.route.name).toBe("primary")
      expect(outcomes(served.attempts)).toEqual(["primary:error:500", "primary:ok"])
      expect(served.attempts[0]!.error).toContain("upstream answered 500")
      expect(mock.calls).toBe(2)
      expect(mock.requests.map((r) => (r.body as { model: string }).model)).toEqual(["up-primary", "up-primary"])
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 1 }))))

  /** `Router.start` on `model`'s chain: its abort, and the exit it was told (once) so far. */
  const started = (model: string) =>
    Effect.gen(function* () {
      const router = yield* Router
      const chain = yield* router.candidates(model)
      const told: Array<Exit.Exit<unknown, unknown>> = []
      const completing = router.start(yield* Effect.runtime<never>(), yield* Effect.clock, chain, body, (exit) => void told.push(exit))
      return { abort: () => completing.abort(), told }
    })
  const until = (check: () => boolean) => Effect.repeat(Effect.sleep("5 millis"), { until: check })

  it.live("Router.start: aborted while its first attempt waits in undici's callbacks, it is told one interruption, and the request is abandoned", () =>
    Effect.gen(function* () {
      mock.pushBehavior({ delayMs: 10_000 })
      const { abort, told } = yield* started("primary")
      yield* until(() => mock.calls === 1)
      expect(told).toEqual([])
      abort()
      abort()
      expect(told.length).toBe(1)
      expect(Exit.isInterrupted(told[0]!)).toBe(true)
      yield* until(() => mock.abandoned === 1)
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 1 }))))

  it.live("Router.start: a failed first attempt goes on as the effect loop (a backoff, then a retry); aborted in the backoff, it is told one interruption and retries nothing", () =>
    Effect.gen(function* () {
      mock.pushBehavior({ status: 500 })
      const { abort, told } = yield* started("primary")
      yield* until(() => mock.calls === 1)
      // The backoff is at least 100 ms: the retry has not started yet.
      yield* Effect.sleep("30 millis")
      abort()
      yield* until(() => told.length > 0)
      expect(Exit.isInterrupted(told[0]!)).toBe(true)
      yield* Effect.sleep("300 millis")
      expect(told.length).toBe(1)
      expect(mock.calls).toBe(1)
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 1 }))))

  /** `Router.startStream` on `model`'s chain, from no fiber: what a fiber takes later, or aborts. */
  const startedStream = (model: string) =>
    Effect.gen(function* () {
      const router = yield* Router
      return router.startStream(yield* Effect.clock, yield* router.candidates(model), () => ({ ...body(), stream: true }))
    })
  /** Every event's data of a served stream, read in the taking fiber's scope. */
  const readAll = (served: { readonly value: AsyncIterable<ReadonlyArray<string>> }) =>
    Effect.promise(async () => {
      const events: Array<string> = []
      for await (const batch of served.value) events.push(...batch)
      return events
    })

  it.live("Router.startStream: its first attempt leaves at once, before any fiber takes it; taken, it serves the stream and books one ok attempt", () =>
    Effect.gen(function* () {
      mock.pushBehavior({ delayMs: 50, chunks: 5, chunkDelayMs: 10 })
      const underway = yield* startedStream("primary")
      // Dispatched by the call itself: the upstream sees the request with no fiber waiting for it.
      yield* until(() => mock.calls === 1)
      const events = yield* Effect.scoped(
        Effect.flatMap(underway.take(), (served) => {
          expect(served.route.name).toBe("primary")
          expect(outcomes(served.attempts)).toEqual(["primary:ok"])
          // Taken, the stream is the taker's: an abort now (its starter's, once its fiber ended) stops nothing.
          underway.abort()
          return readAll(served)
        })
      )
      // The whole stream: its opening event, its five content events, its last one.
      expect(events.length).toBe(7)
      expect(mock.calls).toBe(1)
      expect(mock.abandoned).toBe(0)
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 1 }))))

  it.live("Router.startStream: taken after its stream opened, the stream waited for its fiber, whole; told to `opened` only once taken", () =>
    Effect.gen(function* () {
      const underway = yield* startedStream("primary")
      yield* until(() => mock.calls === 1)
      // Opened meanwhile, nobody to tell: the taking fiber gets it as the effect's answer.
      yield* Effect.sleep("100 millis")
      let told = 0
      const events = yield* Effect.scoped(Effect.flatMap(underway.take(() => (told++, true)), readAll))
      expect(told).toBe(0)
      expect(events.length).toBeGreaterThan(1)
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 1 }))))

  it.live("Router.startStream: a failed first attempt, once taken, goes on as the effect loop (a backoff, then a retry on the same route)", () =>
    Effect.gen(function* () {
      mock.pushBehavior({ status: 500 })
      const underway = yield* startedStream("primary")
      yield* until(() => mock.calls === 1)
      const served = yield* Effect.scoped(Effect.tap(underway.take(), readAll))
      expect(outcomes(served.attempts)).toEqual(["primary:error:500", "primary:ok"])
      expect(mock.calls).toBe(2)
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 1 }))))

  it.live("Router.startStream: never taken, its abort releases the upstream request — waiting for its headers, or opened and unread — and frees the route's probe", () =>
    Effect.gen(function* () {
      mock.pushBehavior({ delayMs: 10_000 })
      const waiting = yield* startedStream("primary")
      yield* until(() => mock.calls === 1)
      waiting.abort()
      waiting.abort()
      yield* until(() => mock.abandoned === 1)
      mock.pushBehavior({ chunks: 50, chunkDelayMs: 20 })
      const opened = yield* startedStream("primary")
      yield* until(() => mock.calls === 2)
      yield* Effect.sleep("100 millis")
      opened.abort()
      yield* until(() => mock.abandoned === 2)
      // Neither aborted attempt counted against the route.
      const router = yield* Router
      expect(router.breakerStatus("primary", Date.now())).toBe("closed")
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 1, breakerFailures: 1 }))))

  it.live("Router.startStream: taken, and the taking fiber interrupted while the first attempt opens: the request is aborted", () =>
    Effect.gen(function* () {
      mock.pushBehavior({ delayMs: 10_000 })
      const underway = yield* startedStream("primary")
      const taking = yield* Effect.fork(Effect.scoped(underway.take()))
      yield* until(() => mock.calls === 1)
      yield* Effect.sleep("20 millis")
      yield* Fiber.interrupt(taking)
      yield* until(() => mock.abandoned === 1)
      underway.abort()
      expect(mock.calls).toBe(1)
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 1 }))))

  it.live("auto falls back to the next route after the first exhausts its retries", () =>
    Effect.gen(function* () {
      mock.behaviorsByModel.set("up-primary", { status: 502 })
      const served = yield* call("auto")
      expect(served.route.name).toBe("secondary")
      expect(outcomes(served.attempts)).toEqual(["primary:error:502", "primary:error:502", "secondary:ok"])
      expect(mock.calls).toBe(3)
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 1 }))))

  it.effect("an upstream 4xx is the client's fault: InvalidRequest, no retry, no fallback, breaker untouched", () =>
    Effect.gen(function* () {
      mock.behaviorsByModel.set("up-primary", { status: 400, reply: "bad field" })
      for (let i = 0; i < 3; i++) {
        const failed = yield* failedCall("auto")
        expect(failed.error._tag).toBe("InvalidRequest")
        expect(failed.error.message).toBe("The upstream model rejected the request: upstream answered 400: bad field")
        expect(outcomes(failed.attempts)).toEqual(["primary:error:400"])
      }
      expect(mock.calls).toBe(3)
      const router = yield* Router
      expect(router.breakerStatus("primary", yield* TestClock.currentTimeMillis)).toBe("closed")
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 1, breakerFailures: 2 }))))

  it.effect("a connection reset fails over to the next route", () =>
    Effect.gen(function* () {
      mock.behaviorsByModel.set("up-primary", { resetBeforeResponse: true })
      const served = yield* call("auto")
      expect(served.route.name).toBe("secondary")
      expect(outcomes(served.attempts)).toEqual(["primary:error", "secondary:ok"])
      expect(served.attempts[0]!.error).toContain("could not reach provider mock")
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 0 }))))

  it.effect("when every route fails: 503 route_unavailable (retryable) with every attempt recorded", () =>
    Effect.gen(function* () {
      mock.setBehavior({ status: 503 })
      const viaAuto = yield* failedCall("auto")
      expect(viaAuto.error._tag).toBe("RouteUnavailable")
      expect(viaAuto.error).toMatchObject({ retryable: true })
      expect(viaAuto.error.message).toMatch(/^No route could serve the request \(secondary: upstream answered 503/)
      expect(outcomes(viaAuto.attempts)).toEqual(["primary:error:503", "secondary:error:503"])
      const named = yield* failedCall("flaky")
      expect(named.error.message).toContain("Retry with model 'auto'")
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 0 }))))

  it.effect("circuit breaker: open after N failures → skipped → half-open probe → re-open → probe → closed", () =>
    Effect.gen(function* () {
      const router = yield* Router
      const status = Effect.map(TestClock.currentTimeMillis, (now) => router.breakerStatus("flaky", now))
      mock.behaviorsByModel.set("up-flaky", { status: 500 })

      expect(outcomes((yield* failedCall("flaky")).attempts)).toEqual(["flaky:error:500"])
      expect(yield* status).toBe("closed")
      yield* failedCall("flaky")
      expect(yield* status).toBe("open")
      expect(mock.calls).toBe(2)

      // Open: the named route is refused up front, and a chain that still holds it skips it.
      const refused = yield* Effect.flip(router.candidates("flaky"))
      expect(refused).toMatchObject({ _tag: "RouteUnavailable", retryable: true })
      expect(refused.message).toContain("circuit open")
      const skipped = yield* Effect.flip(router.complete(router.routes.filter((r) => r.name === "flaky"), body))
      expect(skipped.attempts).toEqual([{ route: "flaky", provider: "mock", outcome: "skipped", error: "circuit open", duration_ms: 0 }])
      expect(skipped.error.message).toContain("flaky: circuit open")
      expect(mock.calls).toBe(2)

      // Half-open after breakerOpenMs: one probe goes through; it fails, so the route re-opens.
      yield* TestClock.adjust(4_999)
      expect(yield* status).toBe("open")
      yield* TestClock.adjust(1)
      expect(yield* status).toBe("half_open")
      expect(names(yield* router.candidates("flaky"))).toEqual(["flaky"])
      expect(outcomes((yield* failedCall("flaky")).attempts)).toEqual(["flaky:error:500"])
      expect(mock.calls).toBe(3)
      expect(yield* status).toBe("open")
      yield* TestClock.adjust(4_999)
      expect((yield* Effect.flip(router.candidates("flaky")))._tag).toBe("RouteUnavailable")

      // The next probe succeeds and closes the route.
      yield* TestClock.adjust(1)
      mock.behaviorsByModel.delete("up-flaky")
      const served = yield* call("flaky")
      expect(outcomes(served.attempts)).toEqual(["flaky:ok"])
      expect(yield* status).toBe("closed")
      // Closed again: it takes the full threshold to re-open.
      mock.behaviorsByModel.set("up-flaky", { status: 500 })
      yield* failedCall("flaky")
      expect(yield* status).toBe("closed")
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 0, breakerFailures: 2, breakerOpenMs: 5_000 }))))

  it.effect("a half-open probe that ends in a defect frees the probe: the next call probes the route", () =>
    Effect.gen(function* () {
      const router = yield* Router
      const flaky = router.routes.filter((r) => r.name === "flaky")
      mock.behaviorsByModel.set("up-flaky", { status: 500 })
      yield* failedCall("flaky")
      yield* failedCall("flaky")
      yield* TestClock.adjust(5_000)
      expect(router.breakerStatus("flaky", yield* TestClock.currentTimeMillis)).toBe("half_open")
      // The probe's call dies before the upstream (a body it cannot serialize): the route said nothing.
      const died = yield* Effect.exit(router.complete(flaky, () => ({ messages: [], extra: 1n })))
      expect(died._tag === "Failure" && Cause.isDie(died.cause)).toBe(true)
      mock.behaviorsByModel.delete("up-flaky")
      expect(outcomes((yield* router.complete(flaky, body)).attempts)).toEqual(["flaky:ok"])
      expect(router.breakerStatus("flaky", yield* TestClock.currentTimeMillis)).toBe("closed")
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 0, breakerFailures: 2, breakerOpenMs: 5_000 }))))

  it.effect("an open auto route drops out of auto's candidates until its probe time", () =>
    Effect.gen(function* () {
      const router = yield* Router
      mock.behaviorsByModel.set("up-primary", { status: 500 })
      yield* call("auto") // primary fails, secondary serves
      yield* call("auto")
      expect(names(yield* router.candidates("auto"))).toEqual(["secondary"])
      expect(names(yield* router.available("prj_any"))).toEqual(["secondary", "flaky"])
      yield* TestClock.adjust(5_000)
      expect(names(yield* router.candidates("auto"))).toEqual(["primary", "secondary"])
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 0, breakerFailures: 2, breakerOpenMs: 5_000 }))))
  it.effect("a failure of the gateway's own (a body it cannot serialize) is a defect: never counted against the route, no upstream call", () =>
    Effect.gen(function* () {
      const router = yield* Router
      // JSON.stringify throws on a BigInt, as it throws "Maximum call stack size exceeded" on a body
      // nested 100k deep: the gateway failed, the route did not.
      const unserializable = () => ({ messages: [{ role: "user", content: "x" }], extra: 1n })
      for (let i = 0; i < 4; i++) {
        const exit = yield* Effect.exit(router.complete(yield* router.candidates("primary"), unserializable))
        expect(exit._tag === "Failure" && Cause.isDie(exit.cause)).toBe(true)
      }
      expect(mock.calls).toBe(0)
      expect(router.breakerStatus("primary", yield* TestClock.currentTimeMillis)).toBe("closed")
      expect((yield* call("primary")).route.name).toBe("primary")
    }).pipe(Effect.provide(routerLayer(gateway(), { upstreamRetries: 1, breakerFailures: 2 }))))
})
