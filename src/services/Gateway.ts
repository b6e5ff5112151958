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
import { ChatStore } from "../store/ChatStore.ts"
import type { Abortable } from "../providers/Provider.ts"
import type { ProgressMark } from "../store/epochs.ts"
import { makeEvaluate } from "./gateway/evaluate.ts"
import { makePlanning } from "./gateway/plan.ts"
import { makeSettlement } from "./gateway/settlement.ts"
import { makeStreaming } from "./gateway/streaming.ts"
import type { ChatCall, GatewayContext, GatewayReply, Plan, SpanOf } from "./gateway/types.ts"
import { IdempotencyStore } from "./IdempotencyStore.ts"
import { Instance } from "./Instance.ts"
import { Ledger } from "./Ledger.ts"
import { Metrics } from "./Metrics.ts"
import { Pricing } from "./Pricing.ts"
import { RateLimiter } from "./RateLimiter.ts"
import { Router, type StartedStream } from "./Router.ts"
import type { Reservation } from "./gateway/plan.ts"
import type { Reserved, ReserveRefused } from "../store/ChatStore.ts"

export type { Evaluation } from "./gateway/evaluate.ts"
export { completedGovernance, verificationOf } from "./gateway/settlement.ts"
export type { ChatCall, GatewayReply, Quote, ReplyHeaders, SseReply } from "./gateway/types.ts"
export type { Governance } from "./surfaces/Surface.ts"

/** A call whose answer goes to its `deliver` (ChatCall.deliver). */
const delivered: GatewayReply = { _tag: "Delivered" }

export class Gateway extends Effect.Service<Gateway>()("tollgate/Gateway", {
  scoped: Effect.gen(function* () {
    const settings = yield* Settings
    /**
     * A span of the governed call, only when traces are exported (OTEL_EXPORTER_OTLP_ENDPOINT): even a
     * disabled tracer's no-op spans cost the chat path measurably (≈ 35% of closed-loop throughput in
     * `npm run bench -- --quick`, five spans a call), so without an exporter the call runs unwrapped.
     */
    const span: SpanOf = Option.isSome(settings.otlpTracesUrl) ? (name, options) => Effect.withSpan(name, options) : () => (self) => self
    const store = yield* ChatStore
    const rateLimiter = yield* RateLimiter
    const idempotency = yield* IdempotencyStore
    const router = yield* Router
    const pricing = yield* Pricing
    const ledger = yield* Ledger
    const metrics = yield* Metrics
    // The callers' fibers the service owns (`adopt`): a client that hangs up does not abandon a call
    // whose charge must still be settled; shutdown interrupts them and their holds are voided. A
    // non-streamed call's upstream leg is in `legs` (below), held by callbacks (docs/decisions/0033).
    const inflight = yield* FiberSet.make<unknown, unknown>()

    const instance = yield* Instance

    // A call may outlive the reservation TTL (a stream always can; a non-streamed call whose upstream
    // trickles its body can): while it runs, its hold and idempotency claim are pushed a TTL ahead
    // every third of a TTL, so the recovery sweep never takes them and a retry never runs it twice
    // (issue 19, finding 3). One timer for every call in flight (a call registers for its lifetime),
    // not a fiber and a timer per call.
    const liveCalls = new Set<Plan>()
    const keepCallsAlive = Effect.gen(function* () {
      if (liveCalls.size === 0) return
      const deadline = (yield* Clock.currentTimeMillis) + settings.reservationTtlMs
      yield* store.extend({
        deadline,
        streams: Array.from(liveCalls, (p) => ({
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
    const streamMarks = new Map<Plan, () => ProgressMark | undefined>()
    /** How to end each open stream (shutdown past its grace). */
    const streamCancels = new Map<Plan, () => void>()
    const beat = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const marks: Array<{ reservationId: string; mark: ProgressMark }> = []
      for (const [p, next] of streamMarks) {
        const mark = next()
        if (mark !== undefined) marks.push({ reservationId: p.hold.reservationId, mark: { ...mark, at: now } })
      }
      yield* store.heartbeat({ epoch: instance.epoch, now, marks })
    })
    yield* Effect.forkScoped(Effect.repeat(Effect.delay(logged("heartbeat")(beat), Duration.millis(settings.heartbeatMs)), Schedule.forever))
    const delivering = new WeakSet<Plan>()
    const legs = new Map<Plan, Abortable>()
    /** Stop every non-streamed call's upstream leg: each then voids its hold, on its own. */
    const stopLegs = () => {
      for (const leg of Array.from(legs.values())) leg.abort()
    }
    /** Wait (up to 2 s) until no call is `left`: their settlements and voids are on their way to the store. */
    const drained = (left: () => number) =>
      Effect.gen(function* () {
        for (let i = 0; i < 200 && left() > 0; i++) yield* Effect.sleep(Duration.millis(10))
      })
    // No fiber holds a leg, so closing the service stops them itself, as closing `inflight` interrupts
    // its fibers: before those (a traced call waits for its leg) and before the store closes.
    // A call begun with no fiber whose reservation commits meanwhile is voided (`stopping`), before the store closes too.
    yield* Effect.addFinalizer(() =>
      Effect.zipRight(
        Effect.sync(() => {
          stopping = true
          stopLegs()
        }),
        Effect.zipRight(drained(() => reserving), drained(() => legs.size))
      )
    )
    const ctx: GatewayContext = {
      settings,
      span,
      traced: Option.isSome(settings.otlpTracesUrl),
      store,
      rateLimiter,
      idempotency,
      router,
      pricing,
      ledger,
      metrics,
      instance,
      liveCalls,
      legs,
      streamMarks,
      streamCancels,
      delivering
    }
    const planning = makePlanning(ctx)
    const { plan } = planning
    const settlement = makeSettlement(ctx)
    const { abandonInterrupted, leg, startLeg } = settlement
    const completeStreaming = makeStreaming(ctx, settlement)
    const evaluate = makeEvaluate(planning)

    /** Run one governed call on the given surface. */
    const handle = (call: ChatCall): Effect.Effect<GatewayReply, GovernanceError> => governedFrom(call, (onReserved) => plan(call, onReserved))

    /** A governed call from `planStep` on — the whole plan, or what is left of one begun with no fiber — under the call's mask. */
    const governedFrom = (
      call: ChatCall,
      planStep: (onReserved: (p: Plan) => void) => Effect.Effect<Plan | GatewayReply, GovernanceError>,
      underway?: StartedStream
    ): Effect.Effect<GatewayReply, GovernanceError> =>
      // The governed call's trace (exported only when an OTLP endpoint is configured: src/server.ts).
      // Ids only: never a key, a secret or a prompt.
      span("tollgate.governed_call", {
        kind: "server",
        attributes: { "tollgate.endpoint": call.surface.path, "tollgate.project_id": call.principal.projectId, "tollgate.environment": call.principal.environment }
      })(
        Effect.uninterruptibleMask((restore) => {
          // The hold this call made, if any: interrupted (shutdown) between its reservation and the
          // step that settles or voids it — a stream still opening — it is voided here. Every write of
          // `abandon` is guarded, so voiding a call already resolved is a no-op. Only the plan, the
          // upstream leg and a stream run interruptibly (`restore`); the steps between them do not,
          // so a call with a hold always reaches the step that settles or voids it. One mask for the
          // call and its upstream leg, not suspend + onInterrupt + a mask of its own (docs/decisions/0027).
          let reserved: Plan | undefined
          return Effect.catchAllCause(
            Effect.flatMap(restore(planStep((p) => (reserved = p))), (planned) => {
              if ("_tag" in planned) return Effect.succeed(planned)
              if (planned.request.stream) return restore(completeStreaming(planned, call.principal, call.deliver, underway))
              // The leg owns the hold from here: it settles or voids it however this fiber ends.
              reserved = undefined
              const deliver = call.deliver
              // The fast path's call ends here; its answer comes from the leg. A traced call, or a caller
              // without `deliver`, waits for it (uninterruptibly: shutdown stops the leg, not the wait).
              if (deliver !== undefined && !ctx.traced) return Effect.as(leg(planned, call.principal, deliver), delivered)
              return Effect.asyncEffect<GatewayReply, GovernanceError, never, never, never, never>((resume) => leg(planned, call.principal, resume))
            }),
            (cause) =>
              reserved !== undefined && Cause.isInterruptedOnly(cause)
                ? abandonInterrupted(reserved, cause)
                : Effect.failCause(cause)
          )
        })
      )

    /**
     * Take ownership of a caller's fiber (the fast path's): shutdown interrupts it with the service's
     * other calls (a hold it reserved is then voided), and nothing else may.
     */
    const adopt = (fiber: Fiber.RuntimeFiber<unknown, unknown>): void => {
      FiberSet.unsafeAdd(inflight, fiber)
    }

    // Calls begun with no fiber (`begin`) whose reservation is on its way to the store, and whether
    // the service is stopping: a reservation that commits then is voided as an interrupted call's.
    let reserving = 0
    let stopping = false
    const reserveThen = store.reserveThen

    /**
     * Begin a governed call with no fiber at all (docs/decisions/0037): a call answered through
     * `deliver`, on the store worker (`reserveThen`), no trace exported. Its plan's pure steps run here
     * (`planNow`, the same steps in the same order as `plan`); its reservation is the store's
     * callback; a non-streamed call's leg starts from there (held by callbacks, 0033) and settles by
     * the store's callback too; a stream goes on from its committed reservation in a fiber the
     * Gateway owns (0038). True when it took the call — whose answer then goes to `deliver` — false
     * when nothing was done and the caller must run `handle`. Where a step needs an effect (a shared
     * rate limiter, a prompt counted slice by slice, no route for a keyed call, a refused
     * reservation), the call goes on as that effect, from that step, in a fiber the Gateway owns.
     */
    const begin = (call: ChatCall, runtime: Runtime.Runtime<never>, clock: Clock.Clock): boolean => {
      const deliver = call.deliver
      // Stopping, a call goes the way it always went: `handle` in a fiber the stopping service interrupts.
      if (stopping || deliver === undefined || ctx.traced || reserveThen === undefined) return false
      const next = planning.planNow(call, clock.unsafeCurrentTimeMillis())
      if (Either.isLeft(next)) return answered(deliver, Exit.fail(next.left))
      const r = next.right
      if (typeof r === "function") return goOn(call, runtime, r)
      reserving++
      reserveThen(r.args, (outcome) => stillReserving(deliver, () => reservedThen(call, deliver, runtime, clock, r, outcome)))
      return true
    }

    /**
     * A step of a call counted in `reserving`, from a callback (the store's message loop, a check
     * phase): nothing of ours may throw there — a throw is the call's defect. The call stops counting
     * once the step returns false: answered, its leg or stream started. True: a later step (its hold's
     * void, its stream's start) is on its way and stops counting it when done.
     */
    const stillReserving = (deliver: NonNullable<ChatCall["deliver"]>, step: () => boolean): void => {
      let later = false
      try {
        later = step()
      } catch (defect) {
        deliver(Exit.die(defect))
      } finally {
        if (!later) reserving--
      }
    }

    const answered = (deliver: NonNullable<ChatCall["deliver"]>, answer: Exit.Exit<GatewayReply, GovernanceError>): true => {
      deliver(answer)
      return true
    }

    /**
     * A call begun with no fiber goes on from `planStep` in a fiber the Gateway owns, as `handle` would
     * have. The fiber starts at once, inside the call's mask before `runFork` returns: a hold its step
     * knows is voided by shutdown's interruption like any other. A stream `underway` before it is
     * taken by it; if the fiber ends without having taken it (interrupted first), it is stopped.
     */
    const goOn = (
      call: ChatCall,
      runtime: Runtime.Runtime<never>,
      planStep: (onReserved: (p: Plan) => void) => Effect.Effect<Plan | GatewayReply, GovernanceError>,
      underway?: StartedStream
    ): true => {
      const deliver = deliveredOnce(call.deliver!, runtime)
      const fiber = Runtime.runFork(runtime)(governedFrom({ ...call, deliver }, planStep, underway))
      adopt(fiber)
      fiber.addObserver((exit) => {
        underway?.abort()
        // A leg started in that fiber answers through `deliver` itself.
        if (Exit.isSuccess(exit) && exit.value._tag === "Delivered") return
        deliver(exit)
      })
      return true
    }

    /**
     * `deliver`, told once: a stream delivered from its upstream's open ends its fiber with the same
     * reply, which is not an answer again. A defect after the answer is only worth a line.
     */
    const deliveredOnce = (deliver: NonNullable<ChatCall["deliver"]>, runtime: Runtime.Runtime<never>): NonNullable<ChatCall["deliver"]> => {
      let told = false
      return (answer) => {
        if (!told) {
          told = true
          return deliver(answer)
        }
        if (Exit.isFailure(answer) && !Cause.isInterruptedOnly(answer.cause)) {
          Runtime.runFork(runtime)(Effect.logError("unhandled failure after the call was answered", Cause.pretty(answer.cause)))
        }
      }
    }

    /**
     * A begun call's reservation answered: start its leg or its stream — or void its hold if the
     * service is stopping —, or go on with a refusal. True while the call still counts as reserving
     * (`reserving`): its void, or its stream's fiber, is on its way, and stops counting it then.
     */
    const reservedThen = (
      call: ChatCall,
      deliver: NonNullable<ChatCall["deliver"]>,
      runtime: Runtime.Runtime<never>,
      clock: Clock.Clock,
      r: Reservation,
      outcome: Exit.Exit<Reserved, ReserveRefused>
    ): boolean => {
      if (Exit.isFailure(outcome)) {
        const refused = Cause.failureOption(outcome.cause)
        if (Option.isSome(refused)) goOn(call, runtime, (onReserved) => planning.refusal(call, onReserved, r, refused.value))
        else deliver(Exit.failCause(outcome.cause as Cause.Cause<never>))
        return false
      }
      const p = planning.plannedOf(call, r, outcome.value)
      crashPoint("reserved")
      if (stopping) return voidStopping(p, deliver, runtime)
      if (!p.request.stream) {
        startLeg(p, call.principal, runtime, clock, deliver)
        return false
      }
      // A stream's upstream request leaves from here; the rest of its start — the fiber that runs it as
      // `handle` would, its sync, its set-up — waits for the loop's check phase: the request is on its
      // way before the gateway spends CPU on anything else (docs/decisions/0039).
      const underway = router.startStream(clock, p.chain, () => upstreamBody(p.body, p.request, p.outputCap))
      setImmediate(() =>
        stillReserving(deliver, () => {
          if (stopping) {
            underway.abort()
            return voidStopping(p, deliver, runtime)
          }
          goOn(call, runtime, (onReserved) => Effect.sync(() => (onReserved(p), p)), underway)
          return false
        })
      )
      return true
    }

    /**
     * A reservation committed while the service is stopping is voided as an interrupted call's: the hold
     * voided, the request failed, the client told 503. The call stops counting as reserving once done.
     */
    const voidStopping = (p: Plan, deliver: NonNullable<ChatCall["deliver"]>, runtime: Runtime.Runtime<never>): true => {
      Runtime.runFork(runtime)(abandonInterrupted(p, Cause.interrupt(FiberId.none))).addObserver((exit) => {
        reserving--
        deliver(exit)
      })
      return true
    }

    /** Governed calls running now: the callers' fibers it owns, calls begun with no fiber, non-streamed legs, and open streams. */
    const inFlight = Effect.map(FiberSet.size(inflight), (n) => n + reserving + streamCancels.size + legs.size)

    /**
     * Shutdown past its grace (src/server.ts): end every call still in flight now. A non-streamed
     * call is interrupted and its hold voided (a settlement already under way completes first); an
     * open stream ends as a client hang-up does, charged for what it delivered. Waits (bounded) for
     * their settlements.
     */
    const stopCalls = Effect.gen(function* () {
      stopping = true
      for (const cancel of Array.from(streamCancels.values())) cancel()
      // Before the fibers: a call waiting for its leg (traced) ends once the leg is stopped.
      stopLegs()
      yield* FiberSet.clear(inflight)
      // A reservation on its way is voided when it commits; legs are live calls too, until settled or voided.
      yield* drained(() => reserving)
      yield* drained(() => liveCalls.size)
    })

    return { handle, begin, adopt, evaluate, inFlight, stopCalls } as const
  })
}) {}
