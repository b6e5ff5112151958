/**
 * Routing (docs/contract.md §3, §8): a model name is either a configured route or `auto`, which tries the
 * `auto: true` routes in configured order. Each route gets up to 1 + `upstreamRetries` attempts with
 * jittered exponential backoff on retryable failures (429, 5xx, connect errors, timeouts), all within
 * one total deadline; `auto` then falls back to the next route. Failures after retries are 503
 * `route_unavailable`; an upstream 4xx caused by the request itself is a 400 and is not retried.
 * Every attempt is recorded for GET /v1/requests/{id}.
 */
import { Clock, Duration, Effect, Either, Exit, Random, type Scope } from "effect"
import { Metrics } from "./Metrics.ts"
import * as Health from "./RouteHealth.ts"
import { countChatInput, countText } from "./Tokenizer.ts"
import { type RouteConfig, Settings } from "../domain/config.ts"
import { InvalidRequest, RouteUnavailable } from "../domain/errors.ts"
import { makeAnthropicProvider } from "../providers/anthropic.ts"
import { makeDemoProvider } from "../providers/demo.ts"
import { makeOpenAIProvider } from "../providers/openai.ts"
import type { ChatProvider, DataEvents, UpstreamFailure, UpstreamReply } from "../providers/Provider.ts"
import type { Attempt } from "./Requests.ts"

export interface Route extends RouteConfig {
  readonly providerName: string
}

export interface Served<A> {
  readonly route: Route
  readonly value: A
  readonly attempts: ReadonlyArray<Attempt>
}

/** The record of an attempt of `route`, started at `t0`, that answered at `t1`. */
const succeeded = (route: Route, t0: number, t1: number): Attempt => ({ route: route.name, provider: route.provider, outcome: "ok", duration_ms: t1 - t0 })

export class RouteFailed {
  readonly _tag = "RouteFailed"
  constructor(readonly error: RouteUnavailable | InvalidRequest, readonly attempts: ReadonlyArray<Attempt>) {}
}

export class Router extends Effect.Service<Router>()("tollgate/Router", {
  effect: Effect.gen(function* () {
    const settings = yield* Settings
    const metrics = yield* Metrics
    const providers = new Map<string, ChatProvider>()
    for (const [name, p] of Object.entries(settings.gateway.providers)) {
      if (p.type === "openai") providers.set(name, makeOpenAIProvider(name, p, settings.upstreamTimeoutMs))
      else if (p.type === "anthropic") providers.set(name, makeAnthropicProvider(name, p, settings.upstreamTimeoutMs))
      else if (p.type === "demo") providers.set(name, makeDemoProvider(p.delay_ms ?? 0, { countChatInput, countText }))
    }
    const routes: ReadonlyArray<Route> = settings.gateway.routes
      .filter((r) => providers.has(r.provider))
      .map((r) => ({ ...r, providerName: r.provider }))
    const byName = new Map(routes.map((r) => [r.name, r]))
    const health = new Map<string, Health.BreakerState>(routes.map((r) => [r.name, Health.closed]))
    const stateOf = (name: string) => health.get(name) ?? Health.closed

    const allowedFor = (route: Route, projectId: string | undefined) =>
      route.projects === undefined || projectId === undefined || route.projects.includes(projectId)

    /** Is the route taking requests now (closed, or open long enough for a probe)? */
    const isAvailable = (route: Route, now: number) => Health.admission(stateOf(route.name), now, settings.breakerOpenMs) !== "open"

    /**
     * The routes a model name may be served by, in the order they are tried: a named route, or the
     * `auto` routes this project may use whose breaker is not open.
     */
    const candidatesAt = (model: string, projectId: string | undefined, now: number): Either.Either<ReadonlyArray<Route>, RouteUnavailable> => {
      if (model === "auto") {
        const usable = routes.filter((r) => r.auto && allowedFor(r, projectId))
        const healthy = usable.filter((r) => isAvailable(r, now))
        if (healthy.length > 0) return Either.right(healthy)
        return Either.left(
          new RouteUnavailable({
            message: usable.length === 0 ? "No route is configured for model auto." : "Every auto route is failing right now (circuit open); retry later.",
            retryable: usable.length > 0
          })
        )
      }
      const route = byName.get(model)
      if (route === undefined || !allowedFor(route, projectId)) {
        const known = ["auto", ...routes.filter((r) => allowedFor(r, projectId)).map((r) => r.name)].join(", ")
        return Either.left(new RouteUnavailable({ message: `The model '${model}' is not a route available to this project. Available: ${known}.`, retryable: false }))
      }
      if (!isAvailable(route, now)) {
        return Either.left(
          new RouteUnavailable({ message: `Route '${model}' is failing right now (circuit open). Retry with model 'auto' so the router can pick an available route.`, retryable: true })
        )
      }
      return Either.right([route])
    }
    const candidates = (model: string, projectId?: string): Effect.Effect<ReadonlyArray<Route>, RouteUnavailable> =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => candidatesAt(model, projectId, now))

    /** Routes this project may use that are available now (GET /v1/models). */
    const available = (projectId: string): Effect.Effect<ReadonlyArray<Route>> =>
      Effect.map(Clock.currentTimeMillis, (now) => routes.filter((r) => allowedFor(r, projectId) && isAvailable(r, now)))


    /**
     * Try the chain in order: each route up to 1 + upstreamRetries times, within one deadline.
     * Written as a loop of plain steps (`attemptAt` calls itself for the next attempt) rather than a
     * generator: the common call is one attempt, and it pays the Effect runtime only for the call itself.
     * `opened` (a stream's, ChatProvider.stream): told what an attempt serves the moment it opens,
     * before the attempt's effect resumes; `call` then gets `tell`, this attempt's way to say so.
     */
    const attemptsOf = <A, R>(
      chain: ReadonlyArray<Route>,
      call: (provider: ChatProvider, route: Route, tell: ((value: A) => boolean) | undefined) => Effect.Effect<A, UpstreamFailure, R>,
      opened?: (served: Served<A>) => boolean
    ): Effect.Effect<Served<A>, RouteFailed, R> =>
      Effect.clockWith((clock) => {
        const attempts: Array<Attempt> = []
        const start = clock.unsafeCurrentTimeMillis()
        const deadline = start + settings.upstreamDeadlineMs
        let lastError = "no route was tried"

        const exhausted = (): Effect.Effect<never, RouteFailed> => {
          const hint = chain.length === 1 && chain[0]!.name !== "auto" ? " Retry with model 'auto' so the router can pick an available route." : ""
          return Effect.fail(new RouteFailed(new RouteUnavailable({ message: `No route could serve the request (${lastError}).${hint}`, retryable: true }), attempts))
        }

        /**
         * Attempt `n` of route `i`, starting at `t0`: the end of the previous attempt (or the start).
         * No time passes between an attempt's end and the next one's start but a backoff sleep, after
         * which the Clock is read again.
         */
        const attemptAt = (i: number, n: number, t0: number): Effect.Effect<Served<A>, RouteFailed, R> => {
          const route = chain[i]
          if (route === undefined) return exhausted()
          if (n > settings.upstreamRetries || t0 >= deadline) return attemptAt(i + 1, 0, t0)
          const admitted = Health.admission(stateOf(route.name), t0, settings.breakerOpenMs)
          if (admitted === "open") {
            attempts.push({ route: route.name, provider: route.provider, outcome: "skipped", error: "circuit open", duration_ms: 0 })
            // Keep the failure that opened the circuit in the message; it is what the client needs.
            lastError = attempts.length > 1 ? `${lastError}; circuit now open` : `${route.name}: circuit open`
            return attemptAt(i + 1, 0, t0)
          }
          health.set(route.name, Health.onAdmit(stateOf(route.name), admitted))
          // Only the upstream's own failures (UpstreamFailure: a status, a timeout, a refused connection)
          // count against the route. A defect is the gateway's own failure (a body it cannot serialize,
          // a bug): it says nothing about the route, so like an interruption it only frees a probe.
          // `either` leaves only a defect or an interruption in a failed exit: one finalizer for both.
          const tell =
            opened === undefined
              ? undefined
              : (value: A) => opened({ route, value, attempts: [...attempts, succeeded(route, t0, clock.unsafeCurrentTimeMillis())] })
          return Effect.either(call(providers.get(route.provider)!, route, tell)).pipe(
            Effect.onExit((exit) =>
              Exit.isFailure(exit) ? Effect.sync(() => health.set(route.name, Health.onAbandon(stateOf(route.name)))) : Effect.void
            ),
            Effect.flatMap((result): Effect.Effect<Served<A>, RouteFailed, R> => {
              const t1 = clock.unsafeCurrentTimeMillis()
              metrics.attempt(route.name, result._tag === "Right" ? "ok" : "error")
              if (result._tag === "Right") {
                health.set(route.name, Health.onSuccess(stateOf(route.name)))
                attempts.push(succeeded(route, t0, t1))
                return Effect.succeed({ route, value: result.right, attempts })
              }
              const failure = result.left
              attempts.push({ route: route.name, provider: route.provider, outcome: "error", status: failure.status, error: failure.message, duration_ms: t1 - t0 })
              health.set(route.name, failure.isClientError ? Health.onSuccess(stateOf(route.name)) : Health.onFailure(stateOf(route.name), t1, settings.breakerFailures))
              if (failure.isClientError) {
                return Effect.fail(new RouteFailed(new InvalidRequest({ message: `The upstream model rejected the request: ${failure.message}`, param: null }), attempts))
              }
              lastError = `${route.name}: ${failure.message}`
              if (!failure.retryable || n >= settings.upstreamRetries) return attemptAt(i + 1, 0, t1)
              return Effect.flatMap(Random.nextIntBetween(0, 50), (jitter) => {
                const backoff = Math.min(2000, 100 * 2 ** n) + jitter
                if (t1 + backoff >= deadline) return attemptAt(i + 1, 0, t1)
                return Effect.zipRight(
                  Effect.sleep(Duration.millis(backoff)),
                  Effect.suspend(() => attemptAt(i, n + 1, clock.unsafeCurrentTimeMillis()))
                )
              })
            })
          )
        }
        return attemptAt(0, 0, start)
      })

    const complete = (chain: ReadonlyArray<Route>, bodyFor: (route: Route) => Record<string, unknown>) =>
      attemptsOf<UpstreamReply, never>(chain, (provider, route) => provider.complete(route, bodyFor(route)))

    /**
     * Open a stream on the first route of the chain that answers. `opened`, when given, is told the
     * stream the moment it opened, as it will be served, and answers whether it took it
     * (ChatProvider.stream): before this effect resumes, and before the route's health and metrics are updated.
     */
    const openStream = (chain: ReadonlyArray<Route>, bodyFor: (route: Route) => Record<string, unknown>, opened?: (served: Served<DataEvents>) => boolean) =>
      attemptsOf<DataEvents, Scope.Scope>(chain, (provider, route, tell) => provider.stream(route, bodyFor(route), tell), opened)

    /** The breaker state of a route now: closed, open or half_open (for operators and tests). */
    const breakerStatus = (name: string, now: number) => Health.describe(stateOf(name), now, settings.breakerOpenMs)

    return { candidates, candidatesAt, available, breakerStatus, complete, openStream, routes } as const
  }),
  dependencies: [Metrics.Default]
}) {}
