/**
 * Routing (DESIGN.md §3, §8): a model name is either a configured route or `auto`, which tries the
 * `auto: true` routes in configured order. Each route gets up to 1 + `upstreamRetries` attempts with
 * jittered exponential backoff on retryable failures (429, 5xx, connect errors, timeouts), all within
 * one total deadline; `auto` then falls back to the next route. Failures after retries are 503
 * `route_unavailable`; an upstream 4xx caused by the request itself is a 400 and is not retried.
 * Every attempt is recorded for GET /v1/requests/{id}.
 */
import { HttpClient } from "@effect/platform"
import { Clock, Duration, Effect, Random, type Scope, type Stream } from "effect"
import { type RouteConfig, Settings } from "../domain/config.ts"
import { InvalidRequest, RouteUnavailable } from "../domain/errors.ts"
import { makeDemoProvider } from "../providers/demo.ts"
import { makeOpenAIProvider } from "../providers/openai.ts"
import type { ChatProvider, UpstreamFailure, UpstreamReply } from "../providers/Provider.ts"
import type { Attempt } from "./Requests.ts"

export interface Route extends RouteConfig {
  readonly providerName: string
}

export interface Served<A> {
  readonly route: Route
  readonly value: A
  readonly attempts: ReadonlyArray<Attempt>
}

export class RouteFailed {
  readonly _tag = "RouteFailed"
  constructor(readonly error: RouteUnavailable | InvalidRequest, readonly attempts: ReadonlyArray<Attempt>) {}
}

export class Router extends Effect.Service<Router>()("tollgate/Router", {
  effect: Effect.gen(function* () {
    const settings = yield* Settings
    const http = yield* HttpClient.HttpClient
    const providers = new Map<string, ChatProvider>()
    for (const [name, p] of Object.entries(settings.gateway.providers)) {
      if (p.type === "openai") providers.set(name, makeOpenAIProvider(name, p, http, settings.upstreamTimeoutMs))
      else if (p.type === "demo") providers.set(name, makeDemoProvider(p.delay_ms ?? 0))
      // other provider types are registered by their adapters as they are added
    }
    const routes: ReadonlyArray<Route> = settings.gateway.routes.map((r) => ({ ...r, providerName: r.provider }))
    const byName = new Map(routes.map((r) => [r.name, r]))
    const autoRoutes = routes.filter((r) => r.auto && providers.has(r.provider))

    /** The routes a model name may be served by, in the order they are tried. */
    const candidates = (model: string): Effect.Effect<ReadonlyArray<Route>, RouteUnavailable> => {
      if (model === "auto") {
        return autoRoutes.length > 0
          ? Effect.succeed(autoRoutes)
          : Effect.fail(new RouteUnavailable({ message: "No route is configured for model auto.", retryable: false }))
      }
      const route = byName.get(model)
      if (route === undefined || !providers.has(route.provider)) {
        const known = ["auto", ...routes.map((r) => r.name)].join(", ")
        return Effect.fail(new RouteUnavailable({ message: `The model '${model}' is not a route of this gateway. Available: ${known}.`, retryable: false }))
      }
      return Effect.succeed([route])
    }

    const attemptsOf = <A, R>(
      chain: ReadonlyArray<Route>,
      call: (provider: ChatProvider, route: Route) => Effect.Effect<A, UpstreamFailure, R>
    ): Effect.Effect<Served<A>, RouteFailed, R> =>
      Effect.gen(function* () {
        const attempts: Array<Attempt> = []
        const start = yield* Clock.currentTimeMillis
        const deadline = start + settings.upstreamDeadlineMs
        let lastError = "no route was tried"
        for (const route of chain) {
          const provider = providers.get(route.provider)!
          for (let attempt = 0; attempt <= settings.upstreamRetries; attempt++) {
            const t0 = yield* Clock.currentTimeMillis
            if (t0 >= deadline) break
            const result = yield* Effect.either(call(provider, route))
            const t1 = yield* Clock.currentTimeMillis
            if (result._tag === "Right") {
              attempts.push({ route: route.name, provider: route.provider, outcome: "ok", duration_ms: t1 - t0 })
              return { route, value: result.right, attempts }
            }
            const failure = result.left
            attempts.push({ route: route.name, provider: route.provider, outcome: "error", status: failure.status, error: failure.message, duration_ms: t1 - t0 })
            if (failure.isClientError) {
              return yield* Effect.fail(new RouteFailed(new InvalidRequest({ message: `The upstream model rejected the request: ${failure.message}`, param: null }), attempts))
            }
            lastError = `${route.name}: ${failure.message}`
            if (!failure.retryable) break
            if (attempt < settings.upstreamRetries) {
              const jitter = yield* Random.nextIntBetween(0, 50)
              const backoff = Math.min(2000, 100 * 2 ** attempt) + jitter
              if (t1 + backoff >= deadline) break
              yield* Effect.sleep(Duration.millis(backoff))
            }
          }
        }
        const hint = chain.length === 1 && chain[0]!.name !== "auto" ? " Retry with model 'auto' so the router can pick an available route." : ""
        return yield* Effect.fail(new RouteFailed(new RouteUnavailable({ message: `No route could serve the request (${lastError}).${hint}`, retryable: true }), attempts))
      })

    const complete = (chain: ReadonlyArray<Route>, bodyFor: (route: Route) => Record<string, unknown>) =>
      attemptsOf<UpstreamReply, never>(chain, (provider, route) => provider.complete(route, bodyFor(route)))

    const openStream = (chain: ReadonlyArray<Route>, bodyFor: (route: Route) => Record<string, unknown>) =>
      attemptsOf<Stream.Stream<string, UpstreamFailure>, Scope.Scope>(chain, (provider, route) => provider.stream(route, bodyFor(route)))

    return { candidates, complete, openStream, routes } as const
  })
}) {}
