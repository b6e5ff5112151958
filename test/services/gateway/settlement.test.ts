/**
 * The non-streamed upstream leg's exits (src/services/gateway/settlement.ts): every way the leg ends
 * without an answer voids the hold exactly once, with its reason, and the call leaves the keep-alive
 * set only after that. The store and the router are stand-ins: the leg's own handling is under test
 * (the real store's writes are covered by the e2e and crash suites).
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, FiberId } from "effect"
import { RouteUnavailable } from "../../../src/domain/errors.ts"
import type { AbandonArgs } from "../../../src/store/ChatStore.ts"
import { makeSettlement } from "../../../src/services/gateway/settlement.ts"
import type { GatewayContext, Plan } from "../../../src/services/gateway/types.ts"
import { RouteFailed } from "../../../src/services/Router.ts"

const plan = { requestId: "req_1", hold: { reservationId: "res_1" }, scope: { projectId: "prj_1", environment: "development" } } as unknown as Plan
const principal = {} as Parameters<ReturnType<typeof makeSettlement>["completeNonStreaming"]>[1]

/** A settlement whose router answers with `leg`; the abandons it writes, and the keep-alive set as each was written. */
const withLeg = (leg: Effect.Effect<never, RouteFailed>) => {
  const abandoned: Array<{ code: string; live: boolean }> = []
  const liveCalls = new Set<Plan>()
  const delivering = new WeakSet<Plan>()
  const ctx = {
    span: () => (self: unknown) => self,
    liveCalls,
    delivering,
    router: { complete: () => leg },
    store: { abandon: (args: AbandonArgs) => Effect.sync(() => void abandoned.push({ code: args.code, live: liveCalls.has(plan) })) }
  } as unknown as GatewayContext
  return { settlement: makeSettlement(ctx), abandoned, liveCalls, delivering }
}

describe("the non-streamed leg's exits", () => {
  it.effect("a defect in the upstream leg voids the hold once (internal_error) and the call fails with the defect", () =>
    Effect.gen(function* () {
      const { settlement, abandoned, liveCalls } = withLeg(Effect.die(new Error("boom")))
      const exit = yield* Effect.exit(settlement.completeNonStreaming(plan, principal))
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect(abandoned).toEqual([{ code: "internal_error", live: true }])
      expect(liveCalls.size).toBe(0)
    }))

  it.effect("no route answering voids the hold once (route_unavailable) and fails with the route's error", () =>
    Effect.gen(function* () {
      const error = new RouteUnavailable({ message: "every route failed", retryable: true })
      const { settlement, abandoned, liveCalls } = withLeg(Effect.fail(new RouteFailed(error, [])))
      const exit = yield* Effect.exit(settlement.completeNonStreaming(plan, principal))
      expect(exit).toEqual(Exit.fail(error))
      expect(abandoned).toEqual([{ code: "route_unavailable", live: true }])
      expect(liveCalls.size).toBe(0)
    }))

  it.effect("an interruption while upstream voids the hold once (interrupted) before the call leaves the keep-alive set", () =>
    Effect.gen(function* () {
      const { settlement, abandoned, liveCalls } = withLeg(Effect.never)
      const fiber = yield* Effect.fork(settlement.completeNonStreaming(plan, principal))
      yield* Effect.yieldNow()
      expect(liveCalls.size).toBe(1)
      const exit = yield* Fiber.interrupt(fiber)
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(abandoned).toEqual([{ code: "interrupted", live: true }])
      expect(liveCalls.size).toBe(0)
    }))

  it.effect("shutdown interrupting a stream already delivering (ChatCall.deliver) leaves its hold to the stream: nothing is voided", () =>
    Effect.gen(function* () {
      const { settlement, abandoned, delivering } = withLeg(Effect.never)
      delivering.add(plan)
      const exit = yield* Effect.exit(settlement.abandonInterrupted(plan, Cause.interrupt(FiberId.none)))
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(abandoned).toEqual([])
    }))
})
