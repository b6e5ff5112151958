/**
 * The governed call (docs/contract.md §3), in this order:
 *   authenticate (done by the caller) → validate workflow → rate check → idempotency claim → route →
 *   price estimate → budget reservation → upstream call (retries / fallback) →
 *   settle (charge, receipt, idempotent result in ONE transaction) → respond.
 *
 * A 401/422/429 touches neither budget nor idempotency state. The claim, the pending request row
 * and the reservation are written in one transaction; so are the charge, the receipt, the request's
 * completion and the stored idempotent result. A failure that charged nothing voids the hold and
 * frees the idempotency key in one transaction.
 *
 * The same pipeline serves every surface (chat completions, responses); a Surface only renders.
 */
import { Cause, Clock, Duration, Effect, Either, Exit, Fiber, FiberId, FiberSet, Option, Runtime, Schedule } from "effect"
import { Settings } from "../domain/config.ts"
import { upstreamBody } from "../domain/chat.ts"
import { crashPoint } from "../domain/crashPoint.ts"
import type { GovernanceError } from "../domain/errors.ts"
import { callbackPort, ChatStore } from "../store/ChatStore.ts"
import type { Reserved, ReserveRefused } from "../store/ChatStore.ts"
import { makeEvaluate } from "./gateway/evaluate.ts"
import { Calls, childSpan, endSpan, InFlight, type LifecycleViolation } from "./gateway/inflight.ts"
import { makePlanning, type PlanRest, type Reservation } from "./gateway/plan.ts"
import { makeSettlement } from "./gateway/settlement.ts"
import { makeStreaming } from "./gateway/streaming.ts"
import type { ChatCall, GatewayContext, GatewayReply, SpanOf } from "./gateway/types.ts"
import { IdempotencyStore } from "./IdempotencyStore.ts"
import { Events } from "./Events.ts"
import { Instance } from "./Instance.ts"
import { Ledger } from "./Ledger.ts"
import { Metrics } from "./Metrics.ts"
import { Pricing } from "./Pricing.ts"
import { RateLimiter } from "./RateLimiter.ts"
import { Router, type StartedStream } from "./Router.ts"

export type { Evaluation } from "./gateway/evaluate.ts"
export { completedGovernance, verificationOf } from "./gateway/settlement.ts"
export type { ChatCall, GatewayReply, Quote, ReplyHeaders, SseReply } from "./gateway/types.ts"
export type { Governance } from "./surfaces/Surface.ts"

export class Gateway extends Effect.Service<Gateway>()("tollgate/Gateway", {
  scoped: Effect.gen(function* () {
    const settings = yield* Settings
    const traced = Option.isSome(settings.otlpTracesUrl)
    /**
     * A span of the governed call, only when traces are exported (OTEL_EXPORTER_OTLP_ENDPOINT): even a
     * disabled tracer's no-op spans cost the chat path measurably (≈ 35% of closed-loop throughput in
     * `npm run bench -- --quick`, five spans a call), so without an exporter the call runs unwrapped.
     */
    const span: SpanOf = traced ? (name, options) => Effect.withSpan(name, options) : () => (self) => self
    const runtime = yield* Effect.runtime<never>()
    const store = callbackPort(yield* ChatStore, runtime)
    const rateLimiter = yield* RateLimiter
    const idempotency = yield* IdempotencyStore
    const router = yield* Router
    const pricing = yield* Pricing
    const ledger = yield* Ledger
    const metrics = yield* Metrics
    const instance = yield* Instance
    // The outbox's budget.exhausted writer; a Gateway built without the Events service writes none.
    const events = Option.getOrUndefined(yield* Effect.serviceOption(Events))

    // Every call taken and not finished (answered, and done with its hold): the keep-alive, the
    // heartbeat, `inFlight` and shutdown read it, and nothing else.
    const calls = new Calls({
      strict: settings.assertInvariants,
      report: (violation: LifecycleViolation) => {
        metrics.lifecycleViolation(violation.kind)
        Runtime.runFork(runtime)(Effect.logError(`lifecycle violation: ${violation.message}`, Cause.pretty(Cause.die(violation))))
      }
    })
    // The effects of the calls (a plan's rest, a stream, a void): shutdown interrupts them, and a hold
    // one of them knows is voided. And the callers' fibers the service adopted (`adopt`: a key read
    // from the store before the call begins).
    const fibers = yield* FiberSet.make<unknown, unknown>()
    const callers = yield* FiberSet.make<unknown, unknown>()

    // A call may outlive the reservation TTL (a stream always can; a non-streamed call whose upstream
    // trickles its body can): while it holds a reservation, its hold and idempotency claim are pushed
    // a TTL ahead every third of a TTL, so the recovery sweep never takes them and a retry never runs
    // it twice (issue 19, finding 3). One timer for every call in flight.
    const keepCallsAlive = Effect.gen(function* () {
      const holding = calls.holding()
      if (holding.length === 0) return
      const deadline = (yield* Clock.currentTimeMillis) + settings.reservationTtlMs
      yield* store.extend({
        deadline,
        streams: holding.map(({ plan: p }) => ({
          reservationId: p.hold.reservationId,
          requestId: p.requestId,
          idempotent: p.idempotency === undefined ? undefined : { scope: p.scope, key: p.idempotency.key }
        }))
      })
    })
    const logged = (what: string) => (e: Effect.Effect<void>) =>
      Effect.catchAllCause(e, (cause) => Effect.logWarning(`${what} failed; retrying at the next beat`, cause))
    yield* Effect.forkScoped(Effect.repeat(Effect.delay(logged("keeping holds alive")(keepCallsAlive), Duration.millis(settings.reservationTtlMs / 3)), Schedule.forever))

    // The heartbeat: this epoch is alive, and each open stream's progress mark (route, rate card and
    // the tokens delivered so far) is written durably when it changed, so a crash charges what the
    // client received (src/services/Recovery.ts). What a stream delivered after its last mark — at
    // most one beat — is not charged if the process dies.
    const beat = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const marks = calls.marks().map(({ reservationId, mark }) => ({ reservationId, mark: { ...mark, at: now } }))
      yield* store.heartbeat({ epoch: instance.epoch, now, marks })
    })
    yield* Effect.forkScoped(Effect.repeat(Effect.delay(logged("heartbeat")(beat), Duration.millis(settings.heartbeatMs)), Schedule.forever))

    /** Run an effect of the call's in a fiber the service owns, under the call's span when traced. */
    const fork: GatewayContext["fork"] = (f, effect, k) => {
      const fiber = Runtime.runFork(f.runtime)(f.span === undefined ? effect : Effect.withParentSpan(effect, f.span))
      FiberSet.unsafeAdd(fibers, fiber)
      fiber.addObserver(k)
    }

    const ctx: GatewayContext = { settings, span, store, rateLimiter, idempotency, router, pricing, ledger, metrics, instance, events, fork }
    const planning = makePlanning(ctx)
    const settlement = makeSettlement(ctx)
    const { abandon, abandonInterrupted, startLeg } = settlement
    const completeStreaming = makeStreaming(ctx, settlement)
    const evaluate = makeEvaluate(planning)

    /** Set when the service stops: a call taken then is answered 503 at once, a reservation committed then voided. */
    let stopping = false

    /** Wait (up to 2 s) until no call is left: their settlements and voids are on their way to the store. */
    const drained = Effect.gen(function* () {
      for (let i = 0; i < 200 && calls.size > 0; i++) yield* Effect.sleep(Duration.millis(10))
    })
    // Closing the service stops every call still in flight, as `stopCalls` does, before the store closes.
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        stopping = true
        calls.stopAll()
        return Effect.zipRight(Effect.zipRight(FiberSet.clear(callers), FiberSet.clear(fibers)), drained)
      })
    )

    /**
     * Take a governed call (the one way a call runs: src/services/gateway/inflight.ts). Its plan's pure
     * steps run here, with no fiber (docs/decisions/0037); its reservation, a non-streamed call's
     * upstream and its settlement are callbacks (0033, 0036); a step that needs an effect — a shared
     * rate limiter, a prompt counted slice by slice, the wait for an original in flight, a stream —
     * runs as that effect in a fiber the service owns. The answer goes to `call.deliver`, once.
     * `runtime` and `clock` are the caller's.
     */
    const begin = (call: ChatCall, runtime: Runtime.Runtime<never>, clock: Clock.Clock): void => {
      const root = traced
        ? Runtime.runSync(runtime)(
            // The governed call's trace. Ids only: never a key, a secret or a prompt.
            Effect.makeSpan("tollgate.governed_call", {
              kind: "server",
              attributes: { "tollgate.endpoint": call.surface.path, "tollgate.project_id": call.principal.projectId, "tollgate.environment": call.principal.environment }
            })
          )
        : undefined
      const f = new InFlight(call, calls, runtime, clock, root)
      calls.add(f)
      // Stopping, the call is answered as a call shutdown interrupted: 503, nothing held.
      if (stopping) return decline(f, Exit.interrupt(FiberId.none))
      guarded(f, () => planned(f, planning.planNow(call, clock.unsafeCurrentTimeMillis())))
    }

    /** Answer a call that holds nothing: a refusal, a replay, a failure before its reservation. */
    const decline = (f: InFlight, answer: Exit.Exit<GatewayReply, GovernanceError>): void => {
      f.to("declined")
      f.answer(answer)
    }

    /**
     * A step of the call, from a callback (the store's message loop, undici's, a check phase): nothing
     * of ours may throw there. A throw is the call's defect: its hold voided, if it holds one, and the
     * defect its answer, unless it was answered.
     */
    const guarded = (f: InFlight, step: () => void): void => {
      try {
        step()
      } catch (defect) {
        failed(f, defect)
      }
    }
    const failed = (f: InFlight, defect: unknown): void => {
      try {
        if (f.holds) {
          return fork(f, Effect.zipRight(abandon(f, "internal_error", "The gateway failed during the call; nothing was charged.", []), Effect.die(defect)), (end) => f.answer(end))
        }
        if (f.phase === "planning") f.to("declined")
        if (!f.answered) return f.answer(Exit.die(defect))
      } catch {
        // The defect's own handling broke the lifecycle: reported there; the defect is logged below.
      }
      Runtime.runFork(f.runtime)(Effect.logError("a governed call failed after it was answered", Cause.pretty(Cause.die(defect))))
    }

    /** Where the plan's pure steps stopped: a refusal, the reservation to make, or the rest as an effect. */
    const planned = (f: InFlight, next: Either.Either<Reservation | PlanRest, GovernanceError>): void => {
      if (Either.isLeft(next)) return decline(f, Exit.fail(next.left))
      const r = next.right
      if (!Effect.isEffect(r)) return reserve(f, r)
      fork(f, r, (exit) =>
        guarded(f, () => {
          if (Exit.isFailure(exit)) return decline(f, Exit.failCause(exit.cause))
          const v = exit.value
          return "_tag" in v ? decline(f, Exit.succeed(v)) : reserve(f, v)
        })
      )
    }

    /** The one reserve transaction (claim, sizing, pending row, hold), by the store's callback. */
    const reserve = (f: InFlight, r: Reservation): void => {
      f.to("reserving")
      const traced = childSpan(f, "tollgate.reserve", () => ({ "tollgate.request_id": r.requestId, "tollgate.route": r.chain[0]!.name }))
      try {
        store.reserveThen(r.args, (outcome) => {
          endSpan(f, traced, outcome)
          guarded(f, () => reserved(f, r, outcome))
        })
      } catch (defect) {
        // Never sent: the call holds nothing, and `failed` answers the defect.
        f.to("declined")
        throw defect
      }
    }

    /**
     * The reservation answered: start the call's leg or its stream — or void its hold if the service is
     * stopping —, or take up its refusal (over budget; a replay, a conflict, an original to wait for).
     */
    const reserved = (f: InFlight, r: Reservation, outcome: Exit.Exit<Reserved, ReserveRefused>): void => {
      if (Exit.isFailure(outcome)) {
        const refused = Cause.failureOption(outcome.cause)
        if (Option.isNone(refused)) return decline(f, Exit.failCause(outcome.cause as Cause.Cause<never>))
        return fork(f, planning.refusal(f.call, r, refused.value), (exit) =>
          guarded(f, () => {
            if (Exit.isFailure(exit)) return decline(f, Exit.failCause(exit.cause))
            if (Option.isSome(exit.value)) return decline(f, Exit.succeed(exit.value.value))
            // The original was released while the call waited: it plans again, as a fresh request.
            f.to("planning")
            planned(f, planning.planNow(f.call, f.clock.unsafeCurrentTimeMillis()))
          })
        )
      }
      const p = planning.plannedOf(f.call, r, outcome.value)
      f.reserved(p)
      crashPoint("reserved")
      if (stopping) return voidStopping(f)
      if (!p.request.stream) return startLeg(f)
      // A stream's upstream request leaves from here; the rest of its start — the fiber that runs it,
      // its sync, its set-up — waits for the loop's check phase: the request is on its way before the
      // gateway spends CPU on anything else (docs/decisions/0039).
      f.to("upstream")
      const underway = router.startStream(f.clock, p.chain, () => upstreamBody(p.body, p.request, p.outputCap))
      f.stop = () => underway.abort()
      setImmediate(() =>
        guarded(f, () => {
          if (stopping) {
            underway.abort()
            return voidStopping(f)
          }
          fork(f, streamed(f, underway), (exit) => streamEnded(f, exit, underway))
        })
      )
    }

    /**
     * The stream's fiber: the stream opened, delivered and settled by its own steps
     * (src/services/gateway/streaming.ts). Interrupted (shutdown) while its hold is still the call's
     * — before it was delivered — the hold is voided here; a stream already delivering settles its own.
     */
    const streamed = (f: InFlight, underway: StartedStream): Effect.Effect<GatewayReply, GovernanceError> =>
      Effect.uninterruptibleMask((restore) =>
        Effect.catchAllCause(restore(completeStreaming(f, underway)), (cause) =>
          Cause.isInterruptedOnly(cause) && f.holds ? abandonInterrupted(f, cause) : Effect.failCause(cause)
        )
      )

    /** The stream's fiber ended: its reply, unless the stream was delivered from its upstream's open. */
    const streamEnded = (f: InFlight, exit: Exit.Exit<GatewayReply, GovernanceError>, underway: StartedStream): void => {
      // Ended before it took the stream (interrupted first): the request already sent is stopped.
      underway.abort()
      if (!f.answered) return f.answer(exit)
      // Delivered already: only a defect of the fiber's last steps is worth a line.
      if (Exit.isFailure(exit) && !Cause.isInterruptedOnly(exit.cause)) {
        Runtime.runFork(f.runtime)(Effect.logError("a stream's fiber failed after it was delivered", Cause.pretty(exit.cause)))
      }
    }

    /** A reservation committed while the service is stopping is voided as an interrupted call's: 503, nothing held. */
    const voidStopping = (f: InFlight): void => fork(f, abandonInterrupted(f, Cause.interrupt(FiberId.none)), (exit) => f.answer(exit))

    /**
     * Take ownership of a caller's fiber (the fast path's key lookup before its call begins): shutdown
     * interrupts it with the service's calls, and nothing else may.
     */
    const adopt = (fiber: Fiber.RuntimeFiber<unknown, unknown>): void => {
      FiberSet.unsafeAdd(callers, fiber)
    }

    /** Governed calls running now: the calls taken and not finished, and the callers' fibers adopted. */
    const inFlight = Effect.map(FiberSet.size(callers), (n) => n + calls.size)

    /**
     * Shutdown past its grace (src/server.ts): end every call still in flight now. A non-streamed call's
     * upstream is stopped and its hold voided (a settlement already under way completes first); an
     * open stream ends as an upstream cut does, charged for what it delivered; a call still planning
     * is interrupted. Waits (bounded) for their settlements and voids.
     */
    const stopCalls = Effect.suspend(() => {
      stopping = true
      calls.stopAll()
      return Effect.zipRight(Effect.zipRight(FiberSet.clear(callers), FiberSet.clear(fibers)), drained)
    })

    return { begin, adopt, evaluate, inFlight, stopCalls } as const
  })
}) {}
