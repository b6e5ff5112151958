/**
 * The non-streamed upstream leg's exits (src/services/gateway/settlement.ts): every way the leg ends
 * without an answer voids the hold exactly once, with its reason, and the call leaves the Gateway's
 * registry (the keep-alive's and shutdown's list) only once answered, after that. The store and the
 * router are stand-ins: the leg's own handling is under test (the real store's writes are covered by
 * the e2e and crash suites).
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, FiberId, Runtime } from "effect"
import { type GovernanceError, RouteUnavailable } from "../../../src/domain/errors.ts"
import type { Abortable, UpstreamReply } from "../../../src/providers/Provider.ts"
import type { AbandonArgs, SettleArgs } from "../../../src/store/ChatStore.ts"
import { Calls, InFlight } from "../../../src/services/gateway/inflight.ts"
import { makeSettlement } from "../../../src/services/gateway/settlement.ts"
import type { ChatCall, GatewayContext, GatewayReply, Plan } from "../../../src/services/gateway/types.ts"
import { RouteFailed, type Served } from "../../../src/services/Router.ts"

const plan = {
  requestId: "req_1",
  hold: { reservationId: "res_1", amount: 1_000 },
  scope: { projectId: "prj_1", environment: "development" },
  prices: new Map([["r", { prices: { input: 1, output: 2 }, version: "rc_test" }]]),
  request: { model: "auto" },
  surface: { renderBody: () => "{}" },
  inputTokens: 3,
  idempotency: undefined
} as unknown as Plan

/** How the stand-in router answers a leg: it gets `done`, and returns the abort. */
type Answer = (done: (exit: Exit.Exit<Served<UpstreamReply>, RouteFailed>) => void) => Abortable

/** A settlement whose router answers with `answer`; the abandons it writes (and whether the call was still registered then), the call and the registry. */
const withLeg = (answer: Answer, settling: Effect.Effect<void> = Effect.void) => {
  const abandoned: Array<{ code: string; live: boolean }> = []
  const settled: Array<number> = []
  const calls = new Calls({ strict: true, report: () => {} })
  const ctx = {
    span: () => (self: unknown) => self,
    router: { start: (_runtime: unknown, _clock: unknown, _chain: unknown, _body: unknown, done: Parameters<Answer>[0]) => answer(done) },
    store: {
      abandon: (args: AbandonArgs) => Effect.sync(() => void abandoned.push({ code: args.code, live: calls.size === 1 })),
      // The settlement's commit, once `settling` is done.
      settleThen: (args: SettleArgs, done: (outcome: Exit.Exit<void>) => void) => Effect.runFork(Effect.as(settling, void settled.push(args.charge))).addObserver(done)
    },
    metrics: { settled: () => {} },
    fork: <A, E>(_f: InFlight, effect: Effect.Effect<A, E>, k: (exit: Exit.Exit<A, E>) => void) => Effect.runFork(effect).addObserver(k)
  } as unknown as GatewayContext
  const settlement = makeSettlement(ctx)
  /** Start the leg of a call that holds its reservation; the effect that waits for its answer. */
  const started = Effect.gen(function* () {
    const answered = yield* Deferred.make<Exit.Exit<GatewayReply, GovernanceError>>()
    const deliver = (exit: Exit.Exit<GatewayReply, GovernanceError>) => Deferred.unsafeDone(answered, Exit.succeed(exit))
    const call = { principal: {}, deliver } as unknown as ChatCall
    const f = new InFlight(call, calls, Runtime.defaultRuntime, yield* Effect.clock, undefined)
    calls.add(f)
    f.to("reserving")
    f.reserved(plan)
    settlement.startLeg(f)
    return { f, answer: Deferred.await(answered) }
  })
  return { settlement, started, abandoned, settled, calls }
}

/** The router answers `exit` a turn after the leg started. */
const later =
  (exit: Exit.Exit<Served<UpstreamReply>, RouteFailed>): Answer =>
  (done) => {
    setImmediate(() => done(exit))
    return { abort: () => {} }
  }

describe("the non-streamed leg's exits", () => {
  it.effect("a defect in the upstream leg voids the hold once (internal_error) and the call fails with the defect", () =>
    Effect.gen(function* () {
      const { started, abandoned, calls } = withLeg(later(Exit.die(new Error("boom"))))
      const { f, answer } = yield* started
      const exit = yield* answer
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect(abandoned).toEqual([{ code: "internal_error", live: true }])
      expect(f.phase).toBe("voided")
      expect(calls.size).toBe(0)
    }))

  it.effect("no route answering voids the hold once (route_unavailable) and fails with the route's error", () =>
    Effect.gen(function* () {
      const error = new RouteUnavailable({ message: "every route failed", retryable: true })
      const { started, abandoned, calls } = withLeg(later(Exit.fail(new RouteFailed(error, []))))
      const exit = yield* (yield* started).answer
      expect(exit).toEqual(Exit.fail(error))
      expect(abandoned).toEqual([{ code: "route_unavailable", live: true }])
      expect(calls.size).toBe(0)
    }))

  it.effect("a throw of ours while reading the upstream's answer (in undici's callback) is the call's defect: its hold voided, answered, and the call leaves the registry", () =>
    Effect.gen(function* () {
      const unreadable = new Proxy({}, { get: () => { throw new Error("a reply we cannot read") } })
      const served = { route: { name: "r" }, value: { raw: "{}", json: unreadable }, attempts: [] } as unknown as Served<UpstreamReply>
      const { started, abandoned, calls } = withLeg(later(Exit.succeed(served)))
      const exit = yield* (yield* started).answer
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect(abandoned).toEqual([{ code: "internal_error", live: true }])
      expect(calls.size).toBe(0)
    }))

  it.effect("stopped while upstream (shutdown): the upstream is aborted, the hold voided once (interrupted) before the call leaves the registry, and the answer is an interruption", () =>
    Effect.gen(function* () {
      let aborted = 0
      const { started, abandoned, calls } = withLeg((done) => ({
        abort: () => {
          aborted++
          done(Exit.interrupt(FiberId.none))
        }
      }))
      const { f, answer } = yield* started
      // Nothing waits in a fiber: the leg is known only to the registry (the keep-alive, shutdown).
      expect(calls.size).toBe(1)
      expect(calls.holding()).toEqual([f])
      calls.stopAll()
      const exit = yield* answer
      expect(aborted).toBe(1)
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(abandoned).toEqual([{ code: "interrupted", live: true }])
      expect(calls.size).toBe(0)
    }))

  it.effect("shutdown interrupting a stream already delivering (ChatCall.deliver) leaves its hold to the stream: nothing is voided", () =>
    Effect.gen(function* () {
      const { settlement, started, abandoned } = withLeg(() => ({ abort: () => {} }))
      const { f } = yield* started
      f.delivering = true
      const exit = yield* Effect.exit(settlement.abandonInterrupted(f, Cause.interrupt(FiberId.none)))
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(abandoned).toEqual([])
    }))

  it.effect("shutdown stopping a call whose settlement is being written: the settlement commits, the call is answered with its reply, nothing is voided", () =>
    Effect.gen(function* () {
      const commit = yield* Deferred.make<void>()
      const served = { route: { name: "r" }, value: { raw: "{}", json: { choices: [{ message: { content: "hi" } }], usage: { prompt_tokens: 3, completion_tokens: 5 } } }, attempts: [] } as unknown as Served<UpstreamReply>
      const { started, abandoned, settled, calls } = withLeg(later(Exit.succeed(served)), Deferred.await(commit))
      const { f, answer } = yield* started
      while (f.phase !== "settling") yield* Effect.promise(() => new Promise((r) => setImmediate(r)))
      // Gateway.stopCalls: each call's stop — here the leg's, whose upstream already answered.
      calls.stopAll()
      yield* Deferred.succeed(commit, undefined)
      const exit = yield* answer
      expect(Exit.isSuccess(exit) && exit.value._tag).toBe("Body")
      expect(f.phase).toBe("settled")
      expect(settled).toHaveLength(1)
      expect(abandoned).toEqual([])
      expect(calls.size).toBe(0)
    }))
})
