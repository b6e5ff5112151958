/**
 * Routing (docs/contract.md §3, §8): a model name is either a configured route or `auto`, which tries the
 * `auto: true` routes in configured order. Each route gets up to 1 + `upstreamRetries` attempts with
 * jittered exponential backoff on retryable failures (429, 5xx, connect errors, timeouts), all within
 * one total deadline; `auto` then falls back to the next route. Failures after retries are 503
 * `route_unavailable`; an upstream 4xx caused by the request itself is a 400 and is not retried.
 * Every attempt is recorded for GET /v1/requests/{id}.
 */
import { Clock, Duration, Effect, Either, Exit, type Fiber, FiberId, Random, Runtime, type Scope } from "effect"
import { Metrics } from "./Metrics.ts"
import * as Health from "./RouteHealth.ts"
import { countChatInput, countText } from "./Tokenizer.ts"
import { type RouteConfig, Settings } from "../domain/config.ts"
import { InvalidRequest, RouteUnavailable } from "../domain/errors.ts"
import { makeAnthropicProvider } from "../providers/anthropic.ts"
import { makeDemoProvider } from "../providers/demo.ts"
import { makeOpenAIProvider } from "../providers/openai.ts"
import { type Abortable, type ChatProvider, type DataEvents, type Opened, openedIn, type UpstreamFailure, type UpstreamReply } from "../providers/Provider.ts"
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

/** A stream whose first attempt was started from a callback (`Router.startStream`), until a fiber takes it. */
export interface StartedStream extends Abortable {
  /** The opening, in the taking fiber: the stream served (living as long as `Scope`), or how every attempt failed. */
  readonly take: (opened?: (served: Served<DataEvents>) => boolean) => Effect.Effect<Served<DataEvents>, RouteFailed, Scope.Scope>
}

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


    /** Where one call's attempts stand: what they recorded, why the last one failed, and their deadline. */
    interface Tries {
      readonly attempts: Array<Attempt>
      lastError: string
      readonly deadline: number
    }
    const triesFrom = (start: number): Tries => ({ attempts: [], lastError: "no route was tried", deadline: start + settings.upstreamDeadlineMs })

    /** Whether `route` takes an attempt at `now`; a route whose circuit is open is recorded as skipped. */
    const admit = (route: Route, now: number, tries: Tries): boolean => {
      const admitted = Health.admission(stateOf(route.name), now, settings.breakerOpenMs)
      if (admitted === "open") {
        tries.attempts.push({ route: route.name, provider: route.provider, outcome: "skipped", error: "circuit open", duration_ms: 0 })
        // Keep the failure that opened the circuit in the message; it is what the client needs.
        tries.lastError = tries.attempts.length > 1 ? `${tries.lastError}; circuit now open` : `${route.name}: circuit open`
        return false
      }
      health.set(route.name, Health.onAdmit(stateOf(route.name), admitted))
      return true
    }

    /**
     * An attempt that ended without an outcome (interrupted, or a defect: the gateway's own failure,
     * a body it cannot serialize, a bug) says nothing about the route: it only frees a probe.
     */
    const abandoned = (route: Route): void => void health.set(route.name, Health.onAbandon(stateOf(route.name)))

    /** What follows an attempt's outcome. */
    type Next<A> =
      | { readonly _tag: "Served"; readonly served: Served<A> }
      | { readonly _tag: "Failed"; readonly failed: RouteFailed }
      | { readonly _tag: "NextRoute"; readonly i: number; readonly at: number }
      | { readonly _tag: "Retry"; readonly i: number; readonly n: number; readonly at: number }

    /**
     * Book attempt `n` of route `i` (started at `t0`, ended at `t1`): its metric, record and the route's
     * health; then what comes next. Only the upstream's own failures (UpstreamFailure: a status, a
     * timeout, a refused connection) count against the route.
     */
    const booked = <A>(chain: ReadonlyArray<Route>, i: number, n: number, t0: number, t1: number, result: Either.Either<A, UpstreamFailure>, tries: Tries): Next<A> => {
      const route = chain[i]!
      metrics.attempt(route.name, result._tag === "Right" ? "ok" : "error")
      if (result._tag === "Right") {
        health.set(route.name, Health.onSuccess(stateOf(route.name)))
        tries.attempts.push(succeeded(route, t0, t1))
        return { _tag: "Served", served: { route, value: result.right, attempts: tries.attempts } }
      }
      const failure = result.left
      tries.attempts.push({ route: route.name, provider: route.provider, outcome: "error", status: failure.status, error: failure.message, duration_ms: t1 - t0 })
      health.set(route.name, failure.isClientError ? Health.onSuccess(stateOf(route.name)) : Health.onFailure(stateOf(route.name), t1, settings.breakerFailures))
      if (failure.isClientError) {
        return { _tag: "Failed", failed: new RouteFailed(new InvalidRequest({ message: `The upstream model rejected the request: ${failure.message}`, param: null }), tries.attempts) }
      }
      tries.lastError = `${route.name}: ${failure.message}`
      if (!failure.retryable || n >= settings.upstreamRetries) return { _tag: "NextRoute", i: i + 1, at: t1 }
      return { _tag: "Retry", i, n, at: t1 }
    }

    /**
     * The chain tried in order as an effect: each route up to 1 + upstreamRetries times, within one
     * deadline. Written as a loop of plain steps (`attemptAt` calls itself for the next attempt)
     * rather than a generator: the common call is one attempt, and it pays the Effect runtime only
     * for the call itself. `continueAfter` resumes the loop after an attempt booked elsewhere (`start`).
     * `opened` (a stream's, ChatProvider.stream): told what an attempt serves the moment it opens,
     * before the attempt's effect resumes; `call` then gets `tell`, this attempt's way to say so.
     */
    const loopOf = <A, R>(
      chain: ReadonlyArray<Route>,
      clock: Clock.Clock,
      tries: Tries,
      call: (provider: ChatProvider, route: Route, tell: ((value: A) => boolean) | undefined) => Effect.Effect<A, UpstreamFailure, R>,
      opened?: (served: Served<A>) => boolean
    ) => {
      const exhausted = (): Effect.Effect<never, RouteFailed> => {
        const hint = chain.length === 1 && chain[0]!.name !== "auto" ? " Retry with model 'auto' so the router can pick an available route." : ""
        return Effect.fail(new RouteFailed(new RouteUnavailable({ message: `No route could serve the request (${tries.lastError}).${hint}`, retryable: true }), tries.attempts))
      }

      /**
       * Attempt `n` of route `i`, starting at `t0`: the end of the previous attempt (or the start).
       * No time passes between an attempt's end and the next one's start but a backoff sleep, after
       * which the Clock is read again.
       */
      const attemptAt = (i: number, n: number, t0: number): Effect.Effect<Served<A>, RouteFailed, R> => {
        const route = chain[i]
        if (route === undefined) return exhausted()
        if (n > settings.upstreamRetries || t0 >= tries.deadline) return attemptAt(i + 1, 0, t0)
        if (!admit(route, t0, tries)) return attemptAt(i + 1, 0, t0)
        const tell =
          opened === undefined
            ? undefined
            : (value: A) => opened({ route, value, attempts: [...tries.attempts, succeeded(route, t0, clock.unsafeCurrentTimeMillis())] })
        return attempted(i, n, t0, call(providers.get(route.provider)!, route, tell))
      }

      /** Attempt `n` of route `i` (admitted at `t0`) as `attempt` runs it: booked, then what follows. */
      const attempted = (i: number, n: number, t0: number, attempt: Effect.Effect<A, UpstreamFailure, R>): Effect.Effect<Served<A>, RouteFailed, R> =>
        // `either` leaves only a defect or an interruption in a failed exit: one finalizer for both.
        Effect.either(attempt).pipe(
          Effect.onExit((exit) => (Exit.isFailure(exit) ? Effect.sync(() => abandoned(chain[i]!)) : Effect.void)),
          Effect.flatMap((result) => continueAfter(booked(chain, i, n, t0, clock.unsafeCurrentTimeMillis(), result, tries)))
        )

      const continueAfter = (next: Next<A>): Effect.Effect<Served<A>, RouteFailed, R> => {
        switch (next._tag) {
          case "Served":
            return Effect.succeed(next.served)
          case "Failed":
            return Effect.fail(next.failed)
          case "NextRoute":
            return attemptAt(next.i, 0, next.at)
          case "Retry":
            return Effect.flatMap(Random.nextIntBetween(0, 50), (jitter) => {
              const backoff = Math.min(2000, 100 * 2 ** next.n) + jitter
              if (next.at + backoff >= tries.deadline) return attemptAt(next.i + 1, 0, next.at)
              return Effect.zipRight(
                Effect.sleep(Duration.millis(backoff)),
                Effect.suspend(() => attemptAt(next.i, next.n + 1, clock.unsafeCurrentTimeMillis()))
              )
            })
        }
      }
      return { attemptAt, attempted, continueAfter }
    }

    const completeLoop = (chain: ReadonlyArray<Route>, bodyFor: (route: Route) => Record<string, unknown>, clock: Clock.Clock, tries: Tries) =>
      loopOf<UpstreamReply, never>(chain, clock, tries, (provider, route) => provider.complete(route, bodyFor(route)))

    /**
     * One call completing on its chain (`start`). Its state is one object with methods, since it lives
     * through the upstream's wait and every scavenge meanwhile copies what it holds (docs/decisions/0034).
     * What stops it is, in turn, the attempt waiting in undici's callbacks, then (once an attempt is
     * the loop's) the loop's fiber; `done` is told once.
     */
    class Completing implements Abortable {
      private over = false
      private attempt: Abortable | undefined = undefined
      private fiber: Fiber.RuntimeFiber<Served<UpstreamReply>, RouteFailed> | undefined = undefined
      readonly tries: Tries

      constructor(
        private readonly runtime: Runtime.Runtime<never>,
        private readonly clock: Clock.Clock,
        private readonly chain: ReadonlyArray<Route>,
        private readonly bodyFor: (route: Route) => Record<string, unknown>,
        private readonly done: (exit: Exit.Exit<Served<UpstreamReply>, RouteFailed>) => void,
        private readonly t0: number
      ) {
        this.tries = triesFrom(t0)
      }

      begin(): void {
        const { chain, t0 } = this
        const route = chain[0]
        const send = route === undefined ? undefined : providers.get(route.provider)!.send
        if (route === undefined || send === undefined || t0 >= this.tries.deadline) return this.inFiber(this.loop().attemptAt(0, 0, t0))
        if (!admit(route, t0, this.tries)) return this.inFiber(this.loop().attemptAt(1, 0, t0))
        try {
          this.attempt = send(route, this.bodyFor(route), this.clock, (result) => this.answered(result))
        } catch (defect) {
          abandoned(route)
          this.finish(Exit.die(defect))
        }
      }

      /** The first attempt's outcome, from undici's callbacks. */
      answered(result: Either.Either<UpstreamReply, UpstreamFailure>): void {
        this.attempt = undefined
        const next = booked(this.chain, 0, 0, this.t0, this.clock.unsafeCurrentTimeMillis(), result, this.tries)
        if (next._tag === "Served") return this.finish(Exit.succeed(next.served))
        if (next._tag === "Failed") return this.finish(Exit.fail(next.failed))
        this.inFiber(this.loop().continueAfter(next))
      }

      abort(): void {
        if (this.over) return
        if (this.fiber !== undefined) return this.fiber.unsafeInterruptAsFork(FiberId.none)
        if (this.attempt === undefined) return
        this.attempt.abort()
        abandoned(this.chain[0]!)
        this.finish(Exit.interrupt(FiberId.none))
      }

      private finish(exit: Exit.Exit<Served<UpstreamReply>, RouteFailed>): void {
        if (this.over) return
        this.over = true
        this.done(exit)
      }

      /** The effect loop, built only when an attempt is not the callback's. */
      private loop() {
        return completeLoop(this.chain, this.bodyFor, this.clock, this.tries)
      }

      private inFiber(effect: Effect.Effect<Served<UpstreamReply>, RouteFailed>): void {
        const fiber = Runtime.runFork(this.runtime)(effect)
        this.fiber = fiber
        fiber.addObserver((exit) => this.finish(exit))
      }
    }

    /**
     * Complete on the chain, held by callbacks (docs/decisions/0033): `done` is told the outcome once.
     * The first attempt, when its route takes it and its provider can `send`, waits for the upstream
     * in undici's callbacks, with no fiber alive; whatever follows it — a backoff and a retry, a
     * fallback, a provider without `send` — runs as the effect loop in a fiber of the caller's runtime.
     * `runtime` and `clock` are the caller's. Returns the abort (shutdown): the attempt is aborted, or
     * that fiber interrupted, and `done` is told an interruption.
     */
    const start = (
      runtime: Runtime.Runtime<never>,
      clock: Clock.Clock,
      chain: ReadonlyArray<Route>,
      bodyFor: (route: Route) => Record<string, unknown>,
      done: (exit: Exit.Exit<Served<UpstreamReply>, RouteFailed>) => void
    ): Abortable => {
      const completing = new Completing(runtime, clock, chain, bodyFor, done, clock.unsafeCurrentTimeMillis())
      completing.begin()
      return completing
    }

    /** `start` as an effect: interrupting it aborts the attempts. */
    const complete = (chain: ReadonlyArray<Route>, bodyFor: (route: Route) => Record<string, unknown>): Effect.Effect<Served<UpstreamReply>, RouteFailed> =>
      Effect.clockWith((clock) =>
        Effect.flatMap(Effect.runtime<never>(), (runtime) =>
          Effect.async<Served<UpstreamReply>, RouteFailed>((resume) => {
            const completing = start(runtime, clock, chain, bodyFor, resume)
            return Effect.sync(() => completing.abort())
          })
        )
      )

    const streamLoop = (chain: ReadonlyArray<Route>, bodyFor: (route: Route) => Record<string, unknown>, clock: Clock.Clock, tries: Tries, opened?: (served: Served<DataEvents>) => boolean) =>
      loopOf<DataEvents, Scope.Scope>(chain, clock, tries, (provider, route, tell) => provider.stream(route, bodyFor(route), tell), opened)

    /**
     * One stream opening on its chain (`startStream`), its first attempt dispatched at once, held by
     * undici's callbacks until a fiber takes it (`take`): from the committed reservation, a stream's
     * request leaves before the call's fiber has even started (docs/decisions/0039). What the attempt
     * answers waits here for `take`; `opened` is told a stream only once `take` gave one. Whatever
     * follows a failed first attempt — a backoff and a retry, a fallback — is the effect loop, in the
     * taking fiber. Never taken, `abort` ends it: the request aborted, or the stream it opened stopped.
     */
    class StreamStart implements StartedStream {
      private attempt: Abortable | undefined = undefined
      /** What the first attempt answered, while no fiber waits for it. */
      private outcome: Exit.Exit<Opened<DataEvents>, UpstreamFailure> | undefined = undefined
      /** The taking fiber, waiting for the first attempt (`openedIn`'s `done`). */
      private waiter: ((outcome: Exit.Exit<Opened<DataEvents>, UpstreamFailure>) => void) | undefined = undefined
      /** The first attempt's outcome went to the taking fiber, which books it and owns the stream. */
      private handed = false
      private aborted = false
      private opened: ((served: Served<DataEvents>) => boolean) | undefined = undefined
      /** The route the loop starts from when no attempt was started here: 0, or 1 when the first refused its admission. */
      private from = 0
      private readonly tries: Tries

      constructor(
        private readonly clock: Clock.Clock,
        private readonly chain: ReadonlyArray<Route>,
        private readonly bodyFor: (route: Route) => Record<string, unknown>,
        private readonly t0: number
      ) {
        this.tries = triesFrom(t0)
      }

      begin(): void {
        const { chain, t0 } = this
        const route = chain[0]
        const start = route === undefined ? undefined : providers.get(route.provider)!.startStream
        if (route === undefined || start === undefined || t0 >= this.tries.deadline) return
        if (!admit(route, t0, this.tries)) return void (this.from = 1)
        try {
          this.attempt = start(route, this.bodyFor(route), this.clock, (outcome) => this.answered(outcome), (events) => this.tell(route, events))
        } catch (defect) {
          this.outcome = Exit.die(defect)
        }
      }

      /** The open's callback: `opened`, once a fiber took this opening and gave one. */
      private tell(route: Route, events: DataEvents): boolean {
        const opened = this.opened
        return opened !== undefined && opened({ route, value: events, attempts: [...this.tries.attempts, succeeded(route, this.t0, this.clock.unsafeCurrentTimeMillis())] })
      }

      private answered(outcome: Exit.Exit<Opened<DataEvents>, UpstreamFailure>): void {
        this.attempt = undefined
        const waiter = this.waiter
        if (waiter === undefined) return void (this.outcome = outcome)
        this.waiter = undefined
        this.handed = true
        waiter(outcome)
      }

      take(opened?: (served: Served<DataEvents>) => boolean): Effect.Effect<Served<DataEvents>, RouteFailed, Scope.Scope> {
        this.opened = opened
        const loop = streamLoop(this.chain, this.bodyFor, this.clock, this.tries, opened)
        if (this.attempt === undefined && this.outcome === undefined) return loop.attemptAt(this.from, 0, this.t0)
        return loop.attempted(
          0,
          0,
          this.t0,
          openedIn((done) => {
            const outcome = this.outcome
            if (outcome === undefined) this.waiter = done
            else {
              this.outcome = undefined
              this.handed = true
              done(outcome)
            }
            return this
          })
        )
      }

      /**
       * The taking fiber was interrupted while the first attempt opens (`openedIn`): the attempt is
       * aborted (the loop frees its probe). Never handed to a fiber: the attempt is aborted, or the
       * stream it opened stopped, and its probe freed.
       */
      abort(): void {
        const attempt = this.attempt
        this.attempt = undefined
        if (this.waiter !== undefined) {
          this.waiter = undefined
          return attempt?.abort()
        }
        if (this.handed || this.aborted) return
        this.aborted = true
        const outcome = this.outcome
        this.outcome = undefined
        if (attempt !== undefined) attempt.abort()
        else if (outcome?._tag === "Success") outcome.value.stop()
        if (attempt !== undefined || outcome !== undefined) abandoned(this.chain[0]!)
      }
    }

    /**
     * Start a stream on the chain, from a callback (Gateway.begin): its first attempt is dispatched
     * now, and a fiber takes the opening later (`StreamStart.take`) or it is aborted.
     */
    const startStream = (clock: Clock.Clock, chain: ReadonlyArray<Route>, bodyFor: (route: Route) => Record<string, unknown>): StartedStream => {
      const start = new StreamStart(clock, chain, bodyFor, clock.unsafeCurrentTimeMillis())
      start.begin()
      return start
    }

    /**
     * Open a stream on the first route of the chain that answers. `opened`, when given, is told the
     * stream the moment it opened, as it will be served, and answers whether it took it
     * (ChatProvider.stream): before this effect resumes, and before the route's health and metrics are updated.
     */
    const openStream = (chain: ReadonlyArray<Route>, bodyFor: (route: Route) => Record<string, unknown>, opened?: (served: Served<DataEvents>) => boolean) =>
      // Started and taken in one uninterruptible step, the take itself interruptible: an interruption
      // anywhere between leaves nothing opened behind (`abort` is a no-op once the take has it).
      Effect.uninterruptibleMask((restore) =>
        Effect.clockWith((clock) => {
          const start = startStream(clock, chain, bodyFor)
          return Effect.ensuring(restore(start.take(opened)), Effect.sync(() => start.abort()))
        })
      )

    /** The breaker state of a route now: closed, open or half_open (for operators and tests). */
    const breakerStatus = (name: string, now: number) => Health.describe(stateOf(name), now, settings.breakerOpenMs)

    return { candidates, candidatesAt, available, breakerStatus, start, complete, startStream, openStream, routes } as const
  }),
  dependencies: [Metrics.Default]
}) {}
