/**
 * Recovery: a hold whose deadline passed belongs to a dead or hung process; the sweep voids it,
 * fails its request and frees its idempotency claim. Fresh holds are left alone.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, TestClock } from "effect"
import { fingerprintOf, IdempotencyStore } from "../../src/services/IdempotencyStore.ts"
import { Ledger } from "../../src/services/Ledger.ts"
import { Projects } from "../../src/services/Projects.ts"
import { ReceiptKeyLive, ReceiptSigner } from "../../src/services/ReceiptSigner.ts"
import { Instance } from "../../src/services/Instance.ts"
import { Recovery } from "../../src/services/Recovery.ts"
import { Requests } from "../../src/services/Requests.ts"
import { ChatStore } from "../../src/store/ChatStore.ts"
import { abandonArgs, reserveArgs } from "../support/portArgs.ts"
import { newProject, storeLayer } from "./layers.ts"

const Base = Layer.mergeAll(Ledger.Default, ChatStore.Default.pipe(Layer.provide(ReceiptKeyLive)), Instance.Default).pipe(
  Layer.provideMerge(Layer.mergeAll(Projects.Default, ReceiptSigner.Default, Requests.Default, IdempotencyStore.Default)),
  Layer.provideMerge(storeLayer())
)
const Live = Recovery.Default.pipe(Layer.provideMerge(Base))

const PERIOD = "1970-01"
const FP = fingerprintOf("POST", "/v1/chat/completions", { model: "auto" })

/** What the Gateway does before calling upstream: one reservation of the store port (claim, pending request, hold). */
const startRequest = (projectId: string, amount: number, deadline: number, key: string) =>
  Effect.gen(function* () {
    const store = yield* ChatStore
    const args = reserveArgs(projectId, amount, { now: 0, period: PERIOD, deadline, claim: { key, fingerprint: FP } })
    expect(yield* store.reserve(args)).toEqual({ outputCap: 1, reservation: amount })
    return { args, hold: args.hold, scope: args.claim!.scope }
  })

/** A new claim of `key` (and a hold of 0), through the port. */
const claimAgain = (projectId: string, key: string, now: number) =>
  Effect.flatMap(ChatStore, (store) => Effect.either(store.reserve(reserveArgs(projectId, 0, { now, period: PERIOD, deadline: now + 100_000, claim: { key, fingerprint: FP } }))))

const claimsOf = (requestId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ n: number }>`SELECT COUNT(*) AS n FROM idempotency WHERE request_id = ${requestId}`).pipe(
    Effect.map((rows) => rows[0]!.n)
  )

describe("Recovery.sweep", () => {
  it.effect("voids an expired hold, fails its request, releases its claim; leaves a fresh hold alone", () =>
    Effect.gen(function* () {
      const recovery = yield* Recovery
      const ledger = yield* Ledger
      const requests = yield* Requests
      const idempotency = yield* IdempotencyStore
      const p = yield* newProject({ budget_credits: 1_000 })
      const stale = yield* startRequest(p.id, 300, 1_000, "stale")
      const fresh = yield* startRequest(p.id, 200, 10_000, "fresh")
      expect(yield* ledger.window(p.id, PERIOD)).toMatchObject({ spent: 0, reserved: 500 })

      // Nothing is due yet.
      yield* TestClock.setTime(999)
      expect(yield* recovery.sweep).toBe(0)

      yield* TestClock.setTime(2_000)
      expect(yield* recovery.sweep).toBe(1)
      expect(yield* ledger.window(p.id, PERIOD)).toMatchObject({ spent: 0, reserved: 200 })

      const failed = yield* requests.find(stale.hold.requestId, stale.scope)
      expect(failed).toMatchObject({
        status: "failed",
        credits_charged: 0,
        error: { code: "reservation_expired" },
        completed_at: new Date(2_000).toISOString()
      })
      expect(yield* claimsOf(stale.hold.requestId)).toBe(0)
      expect((yield* claimAgain(p.id, "stale", 2_000))._tag).toBe("Right")

      expect((yield* requests.find(fresh.hold.requestId, fresh.scope)).status).toBe("pending")
      expect(yield* claimsOf(fresh.hold.requestId)).toBe(1)
      expect(yield* idempotency.peek(fresh.scope, "fresh", FP)).toEqual({ _tag: "InFlight", requestId: fresh.hold.requestId })
      // The fresh hold can still be settled or voided by its own request.
      yield* Effect.flatMap(ChatStore, (store) => store.abandon(abandonArgs(fresh.args, { now: 2_000 })))

      // A second sweep finds nothing more to do.
      expect(yield* recovery.sweep).toBe(0)
      expect(yield* ledger.window(p.id, PERIOD)).toMatchObject({ spent: 0, reserved: 0 })
    }).pipe(Effect.provide(Live)))

  it.effect("a hold already resolved by its request is not touched, even past its deadline", () =>
    Effect.gen(function* () {
      const recovery = yield* Recovery
      const requests = yield* Requests
      const p = yield* newProject({ budget_credits: 1_000 })
      const done = yield* startRequest(p.id, 100, 1_000, "done")
      yield* Effect.flatMap(ChatStore, (store) => store.abandon(abandonArgs(done.args, { now: 500, code: "route_unavailable" })))
      yield* TestClock.setTime(5_000)
      expect(yield* recovery.sweep).toBe(0)
      // The request row keeps what its own request wrote, not the sweep's failure.
      expect(yield* requests.find(done.hold.requestId, done.scope)).toMatchObject({ status: "failed", error: { code: "route_unavailable" } })
    }).pipe(Effect.provide(Live)))

  it.effect("sweeps at start-up, before serving anything", () =>
    Effect.gen(function* () {
      const ledger = yield* Ledger
      const requests = yield* Requests
      const p = yield* newProject({ budget_credits: 1_000 })
      // Left behind by a previous process.
      const orphan = yield* startRequest(p.id, 400, 1_000, "orphan")
      yield* TestClock.setTime(1_000)
      yield* Effect.scoped(Layer.build(Recovery.Default))
      expect(yield* ledger.window(p.id, PERIOD)).toMatchObject({ reserved: 0 })
      expect((yield* requests.find(orphan.hold.requestId, orphan.scope)).status).toBe("failed")
    }).pipe(Effect.provide(Base)))

  it.effect("keeps sweeping in the background, every 10 s (a heartbeat's staleness bound, at most 30 s)", () =>
    Effect.gen(function* () {
      const ledger = yield* Ledger
      const p = yield* newProject({ budget_credits: 1_000 })
      yield* startRequest(p.id, 250, 5_000, "later")
      yield* TestClock.adjust(9_999)
      expect((yield* ledger.window(p.id, PERIOD)).reserved).toBe(250)
      yield* TestClock.adjust(1)
      // Let the background fiber finish its queries.
      for (let i = 0; i < 20 && (yield* ledger.window(p.id, PERIOD)).reserved !== 0; i++) yield* Effect.yieldNow()
      expect((yield* ledger.window(p.id, PERIOD)).reserved).toBe(0)
    }).pipe(Effect.provide(Live)))
})

/**
 * Dead epochs (issue 19, finding 5): a restarted process resolves at once what its previous epoch
 * left in flight — holds voided and keys freed long before their deadline, a stream that had
 * delivered tokens charged from its progress mark — and leaves alone the epochs of live instances.
 */
describe("Recovery of dead epochs", () => {
  const Store = Layer.mergeAll(Ledger.Default, ChatStore.Default.pipe(Layer.provide(ReceiptKeyLive))).pipe(
    Layer.provideMerge(Layer.mergeAll(Projects.Default, ReceiptSigner.Default, Requests.Default, IdempotencyStore.Default)),
    Layer.provideMerge(storeLayer({ instanceId: "host-a" }))
  )
  /** A process starting over the store: its own epoch, then its recovery. */
  const restart = Effect.scoped(Effect.asVoid(Layer.build(Recovery.Default.pipe(Layer.provideMerge(Instance.Default)))))

  const FAR = 10_000_000 // a deadline the sweep would wait for: only the epoch rule can resolve these
  const PRICES = { demo: { input: 1000, output: 2000 } }

  /** A previous process's epoch: what a SIGKILL leaves. */
  const previousProcess = (instanceId: string, heartbeatAt: number) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* sql`INSERT INTO rate_cards (version, effective_from, prices, created_at) VALUES ('rc_test', '1970-01-01T00:00:00Z', ${JSON.stringify(PRICES)}, 0)
                 ON CONFLICT DO NOTHING`
      const rows = yield* sql<{ epoch: number }>`INSERT INTO instances (instance_id, started_at, heartbeat_at) VALUES (${instanceId}, 0, ${heartbeatAt}) RETURNING epoch`
      return rows[0]!.epoch
    })
  /** Its call in flight: reserved through the port, marked with its epoch (and a stream's progress mark). */
  const inEpoch = (epoch: number, projectId: string, amount: number, key: string, progress?: unknown) =>
    Effect.gen(function* () {
      const started = yield* startRequest(projectId, amount, FAR, key)
      const sql = yield* SqlClient.SqlClient
      yield* sql`UPDATE reservations SET epoch = ${epoch}, progress = ${progress === undefined ? null : JSON.stringify(progress)} WHERE id = ${started.hold.reservationId}`
      yield* sql`UPDATE idempotency SET epoch = ${epoch} WHERE request_id = ${started.hold.requestId}`
      if (progress !== undefined) yield* sql`UPDATE requests SET stream = 1 WHERE id = ${started.hold.requestId}`
      return started
    })

  it.effect("voids a call in flight of this instance's previous epoch at once, frees its key; charges a stream from its progress mark", () =>
    Effect.gen(function* () {
      const ledger = yield* Ledger
      const requests = yield* Requests
      const idempotency = yield* IdempotencyStore
      const p = yield* newProject({ budget_credits: 100_000 })
      const epoch = yield* previousProcess("host-a", 0)
      const plain = yield* inEpoch(epoch, p.id, 300, "plain")
      const tokens = { input: 1_000, cached_input: 0, output: 700, reasoning: 0 }
      const stream = yield* inEpoch(epoch, p.id, 5_000, "stream", { route: "demo", rateCardVersion: "rc_test", tokens, at: 0 })
      expect(yield* ledger.window(p.id, PERIOD)).toMatchObject({ spent: 0, reserved: 5_300 })

      yield* TestClock.setTime(1_000) // far before any deadline
      yield* restart

      // ceil((1000 × 1000 + 700 × 2000) / 1e6) = 3 Credits, the rest of the hold released.
      expect(yield* ledger.window(p.id, PERIOD)).toMatchObject({ spent: 3, reserved: 0 })
      expect(yield* requests.find(plain.hold.requestId, plain.scope)).toMatchObject({ status: "failed", credits_charged: 0, error: { code: "interrupted" } })
      expect((yield* claimAgain(p.id, "plain", 2_000))._tag).toBe("Right")

      expect(yield* requests.find(stream.hold.requestId, stream.scope)).toMatchObject({ status: "completed", credits_charged: 3 })
      const receipt = yield* ledger.receipt(stream.hold.requestId, stream.scope)
      expect(receipt).toMatchObject({ credits_charged: 3, tokens, usage_source: "counted", route: "demo", rate_card_version: "rc_test" })
      // A retry of the interrupted stream replays its end and the charge's evidence: no second run, no 409.
      const replay = yield* idempotency.peek(stream.scope, "stream", FP)
      expect(replay._tag).toBe("Replay")
      const text = replay._tag === "Replay" ? new TextDecoder().decode(replay.result.body) : ""
      expect(replay._tag === "Replay" && replay.result.contentType).toBe("text/event-stream")
      expect(text).toContain(`"receipt_id":"${receipt.receipt_id}"`)
      expect(text).toContain('"credits_charged":3')
    }).pipe(Effect.provide(Store)))

  it.effect("leaves another instance's live epoch alone until its heartbeat is stale, then resolves it", () =>
    Effect.gen(function* () {
      const ledger = yield* Ledger
      const p = yield* newProject({ budget_credits: 1_000 })
      const epoch = yield* previousProcess("host-b", 0)
      yield* inEpoch(epoch, p.id, 400, "theirs")
      yield* TestClock.setTime(9_000)
      yield* Effect.scoped(
        Effect.gen(function* () {
          yield* Layer.build(Recovery.Default.pipe(Layer.provideMerge(Instance.Default)))
          // host-b beat at 0 and is not stale at 9 s (10 s): its hold stays.
          expect((yield* ledger.window(p.id, PERIOD)).reserved).toBe(400)
          // The next sweep (10 s later) finds its heartbeat stale.
          yield* TestClock.adjust(10_000)
          for (let i = 0; i < 50 && (yield* ledger.window(p.id, PERIOD)).reserved !== 0; i++) yield* Effect.yieldNow()
          expect((yield* ledger.window(p.id, PERIOD)).reserved).toBe(0)
        })
      )
    }).pipe(Effect.provide(Store)))

  it.effect("a stream whose mark shows no output yet is voided, not charged", () =>
    Effect.gen(function* () {
      const ledger = yield* Ledger
      const p = yield* newProject({ budget_credits: 1_000 })
      const epoch = yield* previousProcess("host-a", 0)
      yield* inEpoch(epoch, p.id, 400, "empty", { route: "demo", rateCardVersion: "rc_test", tokens: { input: 10, cached_input: 0, output: 0, reasoning: 0 }, at: 0 })
      yield* restart
      expect(yield* ledger.window(p.id, PERIOD)).toMatchObject({ spent: 0, reserved: 0 })
    }).pipe(Effect.provide(Store)))
})
