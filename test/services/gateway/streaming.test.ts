/**
 * A stream's headers wait for its reservation's sync (src/services/gateway/streaming.ts, docs/decisions
 * 0013): when the upstream opens first, the reply waits for the disk; when the sync fails, the hold is
 * voided once and the upstream connection closed, and no reply goes out. The store, the router and
 * the settlement are stand-ins: the ordering of the stream's opening is under test (the real store's
 * sync is covered by test/store/ChatStore.test.ts, the streams end to end by test/e2e/streaming.test.ts).
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber } from "effect"
import type { DataEvents } from "../../../src/providers/Provider.ts"
import type { Settlement } from "../../../src/services/gateway/settlement.ts"
import { makeStreaming } from "../../../src/services/gateway/streaming.ts"
import type { GatewayContext, Plan } from "../../../src/services/gateway/types.ts"

const route = { name: "r", provider: "p" }
const plan = {
  requestId: "req_1",
  hold: { reservationId: "res_1" },
  scope: { projectId: "prj_1", environment: "development" },
  prices: new Map([["r", { version: "v1" }]]),
  surface: { streamRenderer: () => ({}) },
  request: { includeUsage: false },
  idempotency: undefined,
  inputTokens: 1
} as unknown as Plan
const principal = {} as Parameters<ReturnType<typeof makeStreaming>>[1]

/** A stream whose sync is `sync`; the abandons written, and whether the upstream connection was released. */
const withSync = (sync: Effect.Effect<void>) => {
  const opened = Effect.runSync(Deferred.make<void>())
  const abandoned: Array<string> = []
  let released = false
  const events: DataEvents = { [Symbol.asyncIterator]: () => ({ next: () => Promise.resolve({ done: true, value: undefined }) }) }
  const ctx = {
    span: () => (self: unknown) => self,
    liveCalls: new Set<Plan>(),
    streamMarks: new Map(),
    streamCancels: new Map(),
    router: {
      // The upstream takes a few turns to open, so a sync that needs none has ended by then.
      openStream: () =>
        Effect.as(
          Effect.zipRight(
            Effect.repeatN(Effect.yieldNow(), 10),
            Effect.zipRight(Effect.addFinalizer(() => Effect.sync(() => (released = true))), Deferred.succeed(opened, undefined))
          ),
          { route, value: events, attempts: [] }
        )
    },
    store: { sync: () => sync }
  } as unknown as GatewayContext
  const settlement = {
    abandon: (_: Plan, code: string) => Effect.sync(() => void abandoned.push(code)),
    settle: () => Effect.die("not settled in these tests"),
    fromRouteFailure: () => Effect.die("no route failure in these tests")
  } as unknown as Settlement
  return { completeStreaming: makeStreaming(ctx, settlement), abandoned, released: () => released, opened: Deferred.await(opened) }
}

describe("a stream's opening and its reservation's sync", () => {
  it.effect("the upstream opens before the sync answers: the reply waits for the disk", () =>
    Effect.gen(function* () {
      const disk = yield* Deferred.make<void>()
      const { completeStreaming, abandoned, opened } = withSync(Deferred.await(disk))
      const opening = yield* Effect.fork(completeStreaming(plan, principal))
      yield* opened
      // Long enough for the rest of the opening to run, were it not waiting.
      for (let i = 0; i < 200; i++) yield* Effect.yieldNow()
      expect(opening.unsafePoll()).toBeNull()
      yield* Deferred.succeed(disk, undefined)
      const reply = yield* Fiber.join(opening)
      expect(reply._tag).toBe("Sse")
      expect(abandoned).toEqual([])
    }))

  it.effect("the sync answered first: the reply goes at once", () =>
    Effect.gen(function* () {
      const { completeStreaming, abandoned } = withSync(Effect.void)
      const reply = yield* completeStreaming(plan, principal)
      expect(reply._tag).toBe("Sse")
      expect(abandoned).toEqual([])
    }))

  it.effect("the sync dies: the hold is voided once (internal_error), the upstream connection released, and the call dies without a reply", () =>
    Effect.gen(function* () {
      const disk = yield* Deferred.make<void>()
      const { completeStreaming, abandoned, released } = withSync(Effect.zipRight(Deferred.await(disk), Effect.die(new Error("the store worker stopped"))))
      const opening = yield* Effect.fork(completeStreaming(plan, principal))
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
      yield* Deferred.succeed(disk, undefined)
      const exit = yield* Fiber.await(opening)
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect(abandoned).toEqual(["internal_error"])
      expect(released()).toBe(true)
    }))

  it.effect("the sync died before the upstream opened: the same, though nothing was left to wait for", () =>
    Effect.gen(function* () {
      const { completeStreaming, abandoned, released } = withSync(Effect.die(new Error("the store worker stopped")))
      const exit = yield* Effect.exit(completeStreaming(plan, principal))
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect(abandoned).toEqual(["internal_error"])
      expect(released()).toBe(true)
    }))
})
