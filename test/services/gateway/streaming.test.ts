/**
 * A stream's headers wait for its reservation's sync (src/services/gateway/streaming.ts, docs/decisions
 * 0013): when the upstream opens first, the reply waits for the disk; when the sync fails, the hold is
 * voided once and the upstream connection closed, and no reply goes out. A stream whose reservation is
 * on disk when its upstream opens is delivered from the open's callback (0031), before the call's
 * fiber resumes; from then on the stream settles its own hold, whatever that fiber meets. The store,
 * the router and the settlement are stand-ins: the ordering of the stream's opening is under test (the
 * real store's sync is covered by test/store/ChatStore.test.ts, the streams end to end by
 * test/e2e/streaming.test.ts).
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Runtime } from "effect"
import type { DataEvents } from "../../../src/providers/Provider.ts"
import { Calls, InFlight } from "../../../src/services/gateway/inflight.ts"
import type { Settlement } from "../../../src/services/gateway/settlement.ts"
import { makeStreaming } from "../../../src/services/gateway/streaming.ts"
import type { ChatCall, GatewayContext, GatewayReply, Plan, SseReply } from "../../../src/services/gateway/types.ts"
import type { GovernanceError } from "../../../src/domain/errors.ts"
import type { Served } from "../../../src/services/Router.ts"

const route = { name: "r", provider: "p" }
const plan = {
  requestId: "req_1",
  hold: { reservationId: "res_1" },
  scope: { projectId: "prj_1", environment: "development" },
  prices: new Map([["r", { version: "v1" }]]),
  surface: {
    streamRenderer: () => ({
      onChunk: (data: string) => [utf8.encode(`data: ${data}\n\n`)],
      complete: () => [utf8.encode("data: [DONE]\n\n")],
      broken: () => [utf8.encode("data: broken\n\n")]
    })
  },
  request: { includeUsage: false },
  idempotency: undefined,
  inputTokens: 1
} as unknown as Plan
const utf8 = new TextEncoder()
const hello = JSON.stringify({ choices: [{ index: 0, delta: { content: "hello" } }] })

/**
 * A stream whose sync is `sync`; the abandons and settlements written, and whether the upstream
 * connection was released. Its upstream sends one event, the token "hello". The router tells the open's
 * callback (ChatCall.deliver's way in) before it answers; when the callback takes the stream, the
 * router answers only once `resume` completes (the real transport resumes the fiber a turn later).
 * `open`: after its event the upstream stays open (until the stream stops reading it); `settling`:
 * what each settlement waits for before it is written.
 */
const withSync = (
  sync: Effect.Effect<void>,
  resume: Effect.Effect<void> = Effect.void,
  o: { readonly open?: boolean; readonly settling?: Effect.Effect<void>; readonly abandonDies?: boolean } = {}
) => {
  const opened = Effect.runSync(Deferred.make<void>())
  const abandoned: Array<string> = []
  const settled: Array<{ route: string; output: number }> = []
  let released = false
  const batches: Array<ReadonlyArray<string>> = [[hello]]
  const done = { done: true, value: undefined } as const
  let stopReading: ((end: typeof done) => void) | undefined
  const events: DataEvents = {
    [Symbol.asyncIterator]: () => ({
      next: () =>
        batches.length > 0
          ? Promise.resolve({ done: false, value: batches.shift()! })
          : o.open === true
            ? new Promise((resolve) => (stopReading = resolve))
            : Promise.resolve(done),
      return: () => {
        stopReading?.(done)
        return Promise.resolve(done)
      }
    })
  }
  const served: Served<DataEvents> = { route: route as Served<DataEvents>["route"], value: events, attempts: [] }
  const calls = new Calls({ strict: true, report: () => {} })
  // The upstream request already on its way (Router.startStream); the stream's fiber takes its opening.
  // It takes a few turns to open, so a sync that needs none has ended by then.
  const underway = {
    abort: () => {},
    take: (tell?: (s: Served<DataEvents>) => boolean) =>
      Effect.gen(function* () {
        yield* Effect.repeatN(Effect.yieldNow(), 10)
        yield* Effect.addFinalizer(() => Effect.sync(() => (released = true)))
        const took = tell?.(served) ?? false
        yield* Deferred.succeed(opened, undefined)
        if (took) yield* resume
        return served
      })
  }
  const ctx = {
    span: () => (self: unknown) => self,
    // The store's sync by callback, as the worker store answers it.
    store: { syncThen: (done: (outcome: Exit.Exit<void>) => void) => Effect.runFork(sync).addObserver(done) }
  } as unknown as GatewayContext
  // Stand-ins that move the call as the real settlement does.
  const settlement = {
    abandon: (f: InFlight, code: string) =>
      Effect.suspend(() => {
        f.to("voided")
        return o.abandonDies === true ? Effect.die(new Error("the store is closed")) : Effect.sync(() => void abandoned.push(code))
      }),
    settle: (
      f: InFlight,
      charged: { served: Served<DataEvents>; tokens: { output: number }; render: (g: unknown, now: number) => unknown },
      _now: number,
      done: (written: Exit.Exit<unknown>) => void
    ) => {
      f.to("settling")
      Effect.runFork(o.settling ?? Effect.void).addObserver(() => {
        settled.push({ route: charged.served.route.name, output: charged.tokens.output })
        charged.render({}, 0)
        f.to("settled")
        done(Exit.succeed({}))
      })
    },
    fromRouteFailure: () => Effect.die("no route failure in these tests")
  } as unknown as Settlement
  const completeStreaming = makeStreaming(ctx, settlement)
  /** The stream's fiber for a call that holds its reservation and whose upstream request left; what is delivered goes to `delivered`. */
  const stream = (delivered: Array<SseReply> = []) =>
    Effect.flatMap(Effect.clock, (clock) => {
      const call = { principal: {}, deliver: into(delivered) } as unknown as ChatCall
      const f = new InFlight(call, calls, Runtime.defaultRuntime, clock, undefined)
      calls.add(f)
      f.to("reserving")
      f.reserved(plan)
      f.to("upstream")
      last = f
      return completeStreaming(f, underway)
    })
  let last: InFlight | undefined
  return {
    stream,
    /** The call of the last stream begun. */
    call: () => last!,
    calls,
    abandoned,
    settled,
    released: () => released,
    opened: Deferred.await(opened)
  }
}

/** A `deliver` that keeps the streams it is given (and nothing else is expected). */
const into =
  (delivered: Array<SseReply>) =>
  (answer: Exit.Exit<GatewayReply, GovernanceError>): void => {
    if (!Exit.isSuccess(answer) || answer.value._tag !== "Sse") throw new Error("only a stream is delivered here")
    delivered.push(answer.value)
  }

/** Every frame of a reply, as text. */
const readAll = (reply: SseReply) =>
  Effect.promise(async () => {
    const out: Array<string> = []
    for await (const frame of reply.frames) out.push(new TextDecoder().decode(frame))
    return out
  })

describe("a stream's opening and its reservation's sync", () => {
  it.effect("the upstream opens before the sync answers: nothing is delivered from the open, and the call's own reply waits for the disk", () =>
    Effect.gen(function* () {
      const disk = yield* Deferred.make<void>()
      const { stream, call, abandoned, opened } = withSync(Deferred.await(disk))
      const delivered: Array<SseReply> = []
      const opening = yield* Effect.fork(stream(delivered))
      yield* opened
      // Long enough for the rest of the opening to run, were it not waiting.
      for (let i = 0; i < 200; i++) yield* Effect.yieldNow()
      expect(opening.unsafePoll()).toBeNull()
      yield* Deferred.succeed(disk, undefined)
      const reply = yield* Fiber.join(opening)
      expect(reply._tag).toBe("Sse")
      expect(delivered).toEqual([])
      expect(call().delivering).toBe(false)
      expect(abandoned).toEqual([])
    }))

  it.effect("the sync answered first: the reply goes at once", () =>
    Effect.gen(function* () {
      const { stream, abandoned } = withSync(Effect.void)
      const delivered: Array<SseReply> = []
      const reply = yield* stream(delivered)
      expect(delivered).toEqual([reply])
      expect(reply._tag).toBe("Sse")
      expect(abandoned).toEqual([])
    }))

  it.effect("the sync dies: the hold is voided once (internal_error), the upstream connection released, and the call dies without a reply", () =>
    Effect.gen(function* () {
      const disk = yield* Deferred.make<void>()
      const { stream, abandoned, released } = withSync(Effect.zipRight(Deferred.await(disk), Effect.die(new Error("the store worker stopped"))))
      const opening = yield* Effect.fork(stream())
      for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
      yield* Deferred.succeed(disk, undefined)
      const exit = yield* Fiber.await(opening)
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect(abandoned).toEqual(["internal_error"])
      expect(released()).toBe(true)
    }))

  it.effect("the reservation is on disk when the upstream opens: the stream is delivered from the open's callback, before the call's fiber resumes", () =>
    Effect.gen(function* () {
      const gate = yield* Deferred.make<void>()
      const { stream, call, abandoned, settled, opened } = withSync(Effect.void, Deferred.await(gate))
      const delivered: Array<SseReply> = []
      const opening = yield* Effect.fork(stream(delivered))
      yield* opened
      expect(delivered.length).toBe(1)
      expect(call().delivering).toBe(true)
      expect(opening.unsafePoll()).toBeNull()
      yield* Deferred.succeed(gate, undefined)
      // The fiber ends with the same reply; the Gateway, whose call was answered, ignores that end.
      expect(yield* Fiber.join(opening)).toBe(delivered[0])
      expect(yield* readAll(delivered[0]!)).toEqual([`data: ${hello}\n\n`, "data: [DONE]\n\n"])
      expect(settled).toEqual([{ route: "r", output: 1 }])
      expect(abandoned).toEqual([])
    }))

  it.effect("interrupted after it was delivered (shutdown): the hold is neither voided nor its connection closed by the fiber; the stream settles what it delivered", () =>
    Effect.gen(function* () {
      const { stream, call, abandoned, settled, released, opened } = withSync(Effect.void, Effect.never)
      const delivered: Array<SseReply> = []
      const opening = yield* Effect.fork(stream(delivered))
      yield* opened
      yield* Fiber.interrupt(opening)
      expect(call().delivering).toBe(true)
      expect(abandoned).toEqual([])
      expect(released()).toBe(false)
      expect(yield* readAll(delivered[0]!)).toEqual([`data: ${hello}\n\n`, "data: [DONE]\n\n"])
      expect(settled).toEqual([{ route: "r", output: 1 }])
      // The stream's own end closed the connection.
      expect(released()).toBe(true)
    }))

  it.effect("the sync died before the upstream opened: the same, though nothing was left to wait for", () =>
    Effect.gen(function* () {
      const { stream, abandoned, released } = withSync(Effect.die(new Error("the store worker stopped")))
      const exit = yield* Effect.exit(stream())
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      expect(abandoned).toEqual(["internal_error"])
      expect(released()).toBe(true)
    }))

  it.effect("shutdown stops a stream it already read from: the call stays in flight until its settlement is written, then leaves", () =>
    Effect.gen(function* () {
      const written = yield* Deferred.make<void>()
      const { stream, calls, settled } = withSync(Effect.void, Effect.void, { open: true, settling: Deferred.await(written) })
      const reply = yield* stream()
      if (reply._tag !== "Sse") throw new Error("not a stream")
      const frames = reply.frames[Symbol.asyncIterator]()
      expect(new TextDecoder().decode((yield* Effect.promise(() => frames.next())).value)).toBe(`data: ${hello}\n\n`)
      const rest = Effect.runPromise(Effect.promise(async () => {
        const out: Array<string> = []
        for (let f = await frames.next(); f.done !== true; f = await frames.next()) out.push(new TextDecoder().decode(f.value))
        return out
      }))
      expect(calls.size).toBe(1)
      // Gateway.stopCalls: each call's stop, then a wait for the registry to empty.
      calls.stopAll()
      yield* Effect.promise(() => new Promise((r) => setTimeout(r, 20)))
      expect(settled).toEqual([])
      expect(calls.size).toBe(1)
      yield* Deferred.succeed(written, undefined)
      expect(yield* Effect.promise(() => rest)).toEqual(["data: broken\n\n"])
      expect(settled).toEqual([{ route: "r", output: 1 }])
      expect(calls.size).toBe(0)
    }))

  it.effect("a stream cancelled before it was read, whose void dies (the store gone under shutdown): logged, the call out of flight, no unhandled rejection", () =>
    Effect.gen(function* () {
      const { stream, calls, released } = withSync(Effect.void, Effect.void, { abandonDies: true })
      const reply = yield* stream()
      if (reply._tag !== "Sse") throw new Error("not a stream")
      expect(calls.size).toBe(1)
      const unhandled: Array<unknown> = []
      const listener = (e: unknown) => void unhandled.push(e)
      process.prependListener("unhandledRejection", listener)
      try {
        // The client hung up before the first frame was read: nobody awaits the settlement.
        reply.cancel()
        yield* Effect.promise(() => new Promise((r) => setTimeout(r, 50)))
      } finally {
        process.removeListener("unhandledRejection", listener)
      }
      expect(unhandled).toEqual([])
      expect(calls.size).toBe(0)
      expect(released()).toBe(true)
    }))
})
