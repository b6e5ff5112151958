/**
 * The idempotency records' statements (src/store/idempotencyStatements.ts) and the IdempotencyStore
 * service's reads: the claim is one INSERT, a finished record replays its exact bytes, a different
 * payload is a conflict, a release frees the key, records expire, and a duplicate waits boundedly.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer, TestClock } from "effect"
import { checkKey, fingerprintOf, IdempotencyStore, validIdempotencyKey } from "../../src/services/IdempotencyStore.ts"
import { idempotencyStatements } from "../support/statements.ts"
import { storeLayer } from "../services/layers.ts"

const Live = IdempotencyStore.Default.pipe(Layer.provideMerge(storeLayer()))

const scope = { projectId: "prj_a", environment: "development" }
const KEY = "order-42"
const FP = fingerprintOf("POST", "/v1/chat/completions", { model: "auto", messages: [{ role: "user", content: "hi" }] })
const OTHER_FP = fingerprintOf("POST", "/v1/chat/completions", { model: "auto", messages: [{ role: "user", content: "bye" }] })
const DAY = 24 * 3600_000
/** A claim deadline (absolute ms) no test reaches. */
const FAR = 1000 * DAY
/** Bytes that are not valid UTF-8, so a lossy round trip through a string would show. */
const BODY = new Uint8Array([0x7b, 0x00, 0xff, 0xfe, 0x80, 0x0a, 0x7d])

describe("IdempotencyStore.claim", () => {
  it.effect("two concurrent claims of one key: exactly one is Claimed, the other sees it in flight", () =>
    Effect.gen(function* () {
      const store = yield* idempotencyStatements
      const outcomes = yield* Effect.all(
        [store.claim(scope, KEY, FP, "req_1", FAR), store.claim(scope, KEY, FP, "req_2", FAR)],
        { concurrency: "unbounded" }
      )
      const claimed = outcomes.filter((o) => o._tag === "Claimed")
      expect(claimed).toHaveLength(1)
      const winner = outcomes[0]!._tag === "Claimed" ? "req_1" : "req_2"
      expect(outcomes.find((o) => o._tag !== "Claimed")).toEqual({ _tag: "InFlight", requestId: winner })
    }).pipe(Effect.provide(Live)))

  it.effect("finish → a duplicate replays status, content type, request id and identical bytes", () =>
    Effect.gen(function* () {
      const store = yield* idempotencyStatements
      expect(yield* store.claim(scope, KEY, FP, "req_1", FAR)).toEqual({ _tag: "Claimed" })
      yield* store.finish(scope, KEY, "req_1", { status: 201, contentType: "application/x-test", body: BODY }, DAY)
      const again = yield* store.claim(scope, KEY, FP, "req_2", FAR)
      expect(again._tag).toBe("Replay")
      if (again._tag !== "Replay") return
      expect(again.result.status).toBe(201)
      expect(again.result.contentType).toBe("application/x-test")
      expect(again.result.requestId).toBe("req_1")
      expect(Buffer.from(again.result.body).equals(Buffer.from(BODY))).toBe(true)
      expect(yield* store.peek(scope, KEY, FP)).toEqual(again)
    }).pipe(Effect.provide(Live)))

  it.effect("a different payload under the same key is a Conflict, in flight or finished", () =>
    Effect.gen(function* () {
      const store = yield* idempotencyStatements
      yield* store.claim(scope, KEY, FP, "req_1", FAR)
      expect(yield* store.claim(scope, KEY, OTHER_FP, "req_2", FAR)).toEqual({ _tag: "Conflict" })
      yield* store.finish(scope, KEY, "req_1", { status: 200, contentType: "application/json", body: BODY }, DAY)
      expect(yield* store.claim(scope, KEY, OTHER_FP, "req_3", FAR)).toEqual({ _tag: "Conflict" })
      expect(yield* store.peek(scope, KEY, OTHER_FP)).toEqual({ _tag: "Conflict" })
    }).pipe(Effect.provide(Live)))

  it.effect("the same key in another project or environment is a separate record", () =>
    Effect.gen(function* () {
      const store = yield* idempotencyStatements
      yield* store.claim(scope, KEY, FP, "req_1", FAR)
      expect(yield* store.claim({ ...scope, environment: "production" }, KEY, OTHER_FP, "req_2", FAR)).toEqual({ _tag: "Claimed" })
      expect(yield* store.claim({ ...scope, projectId: "prj_b" }, KEY, OTHER_FP, "req_3", FAR)).toEqual({ _tag: "Claimed" })
    }).pipe(Effect.provide(Live)))

  it.effect("release frees an in-flight claim of its owner only; a finished record is never released", () =>
    Effect.gen(function* () {
      const store = yield* idempotencyStatements
      yield* store.claim(scope, KEY, FP, "req_1", FAR)
      yield* store.release(scope, KEY, "req_other")
      expect(yield* store.peek(scope, KEY, FP)).toEqual({ _tag: "InFlight", requestId: "req_1" })
      yield* store.release(scope, KEY, "req_1")
      expect(yield* store.claim(scope, KEY, OTHER_FP, "req_2", FAR)).toEqual({ _tag: "Claimed" })

      yield* store.finish(scope, KEY, "req_2", { status: 200, contentType: "application/json", body: BODY }, DAY)
      yield* store.release(scope, KEY, "req_2")
      expect((yield* store.peek(scope, KEY, OTHER_FP))._tag).toBe("Replay")
    }).pipe(Effect.provide(Live)))

  it.effect("releaseRequests frees the in-flight claims of the named requests and nothing else", () =>
    Effect.gen(function* () {
      const store = yield* idempotencyStatements
      yield* store.claim(scope, "k1", FP, "req_1", FAR)
      yield* store.claim(scope, "k2", FP, "req_2", FAR)
      yield* store.claim(scope, "k3", FP, "req_3", FAR)
      yield* store.finish(scope, "k3", "req_3", { status: 200, contentType: "application/json", body: BODY }, DAY)
      yield* store.releaseRequests(["req_1", "req_3"])
      yield* store.releaseRequests([])
      expect(yield* store.peek(scope, "k1", FP)).toEqual({ _tag: "Claimed" })
      expect(yield* store.peek(scope, "k2", FP)).toEqual({ _tag: "InFlight", requestId: "req_2" })
      expect((yield* store.peek(scope, "k3", FP))._tag).toBe("Replay")
    }).pipe(Effect.provide(Live)))
})

describe("IdempotencyStore expiry", () => {
  it.effect("an in-flight claim lapses at its claim deadline and can be re-taken", () =>
    Effect.gen(function* () {
      const store = yield* idempotencyStatements
      yield* store.claim(scope, KEY, FP, "req_1", 1_000)
      yield* TestClock.adjust(999)
      expect(yield* store.claim(scope, KEY, FP, "req_2", 5_000)).toEqual({ _tag: "InFlight", requestId: "req_1" })
      yield* TestClock.adjust(1)
      expect(yield* store.peek(scope, KEY, FP)).toEqual({ _tag: "Claimed" })
      expect(yield* store.claim(scope, KEY, OTHER_FP, "req_2", 5_000)).toEqual({ _tag: "Claimed" })
      expect(yield* store.peek(scope, KEY, OTHER_FP)).toEqual({ _tag: "InFlight", requestId: "req_2" })
    }).pipe(Effect.provide(Live)))

  it.effect("a finished record replays for its whole TTL and is gone after it", () =>
    Effect.gen(function* () {
      const store = yield* idempotencyStatements
      yield* store.claim(scope, KEY, FP, "req_1", 1_000)
      yield* TestClock.adjust(500)
      // The TTL counts from the finish, not from the claim.
      yield* store.finish(scope, KEY, "req_1", { status: 200, contentType: "application/json", body: BODY }, DAY)
      yield* TestClock.adjust(DAY - 1)
      expect((yield* store.claim(scope, KEY, FP, "req_2", FAR))._tag).toBe("Replay")
      yield* TestClock.adjust(1)
      expect(yield* store.peek(scope, KEY, FP)).toEqual({ _tag: "Claimed" })
      expect(yield* store.claim(scope, KEY, FP, "req_3", FAR)).toEqual({ _tag: "Claimed" })
    }).pipe(Effect.provide(Live)))
})

describe("IdempotencyStore.awaitSettled", () => {
  it.effect("times out with IdempotencyConflict when the original stays in flight", () =>
    Effect.gen(function* () {
      const store = yield* idempotencyStatements
      yield* store.claim(scope, KEY, FP, "req_1", FAR)
      const waiter = yield* Effect.fork(Effect.flip(store.awaitSettled(scope, KEY, FP, 250)))
      yield* TestClock.adjust(249)
      expect(waiter.unsafePoll()).toBeNull()
      yield* TestClock.adjust(1_000)
      const error = yield* Fiber.join(waiter)
      expect(error._tag).toBe("IdempotencyConflict")
      expect(error.message).toContain("req_1")
    }).pipe(Effect.provide(Live)))

  it.effect("returns the replay once the original finishes while it waits", () =>
    Effect.gen(function* () {
      const store = yield* idempotencyStatements
      yield* store.claim(scope, KEY, FP, "req_1", FAR)
      const waiter = yield* Effect.fork(store.awaitSettled(scope, KEY, FP, 10_000))
      yield* TestClock.adjust(50)
      yield* store.finish(scope, KEY, "req_1", { status: 200, contentType: "application/json", body: BODY }, DAY)
      yield* TestClock.adjust(200)
      const outcome = yield* Fiber.join(waiter)
      expect(outcome._tag).toBe("Replay")
    }).pipe(Effect.provide(Live)))

  it.effect("returns Claimed (run it yourself) once the original releases its claim", () =>
    Effect.gen(function* () {
      const store = yield* idempotencyStatements
      yield* store.claim(scope, KEY, FP, "req_1", FAR)
      const waiter = yield* Effect.fork(store.awaitSettled(scope, KEY, FP, 10_000))
      yield* TestClock.adjust(20)
      yield* store.release(scope, KEY, "req_1")
      yield* TestClock.adjust(200)
      expect(yield* Fiber.join(waiter)).toEqual({ _tag: "Claimed" })
    }).pipe(Effect.provide(Live)))
})

describe("idempotency keys and fingerprints", () => {
  it("a key is 1–255 printable ASCII characters", () => {
    expect(validIdempotencyKey("a")).toBe(true)
    expect(validIdempotencyKey("x".repeat(255))).toBe(true)
    expect(validIdempotencyKey("x".repeat(256))).toBe(false)
    expect(validIdempotencyKey("")).toBe(false)
    expect(validIdempotencyKey("tab\there")).toBe(false)
    expect(validIdempotencyKey("é")).toBe(false)
  })

  it.effect("checkKey names the offending parameter", () =>
    Effect.gen(function* () {
      expect(yield* checkKey("ok-key", "Idempotency-Key")).toBe("ok-key")
      expect(yield* Effect.flip(checkKey("", "Idempotency-Key"))).toMatchObject({ _tag: "InvalidRequest", param: "Idempotency-Key" })
    }))

  it("the fingerprint ignores JSON key order but not method, path or content", () => {
    const a = fingerprintOf("POST", "/v1/chat/completions", { model: "m", temperature: 0 })
    expect(fingerprintOf("POST", "/v1/chat/completions", { temperature: 0, model: "m" })).toBe(a)
    expect(fingerprintOf("POST", "/v1/responses", { model: "m", temperature: 0 })).not.toBe(a)
    expect(fingerprintOf("PUT", "/v1/chat/completions", { model: "m", temperature: 0 })).not.toBe(a)
    expect(fingerprintOf("POST", "/v1/chat/completions", { model: "m", temperature: 1 })).not.toBe(a)
    expect(a).toMatch(/^[0-9a-f]{64}$/)
  })
})
