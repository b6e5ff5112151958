import fc from "fast-check"
import { describe, expect, it } from "vitest"
import * as Idem from "../../spec/idempotency.ts"
import { numRuns } from "./runs.ts"

const A: Idem.Scope = { project: "prj_a", environment: "production" }
const B: Idem.Scope = { project: "prj_a", environment: "staging" }
const DAY = Idem.MIN_TTL_MILLIS
const ok200: Idem.StoredResult = { status: 200, body: '{"id":"chatcmpl-1"}' }
const HOLD = 15 * 60_000

describe("idempotency examples", () => {
  it("claim, then in flight, then replay of the stored result", () => {
    const c1 = Idem.claim(Idem.empty, A, "k", "fp1", "req_1", 0)
    expect(c1.outcome).toEqual({ _tag: "Claimed" })
    expect(Idem.claim(c1.state, A, "k", "fp1", "req_2", 1).outcome).toEqual({ _tag: "InFlight", requestId: "req_1" })
    const f = Idem.finish(c1.state, A, "k", "req_1", ok200, 1)
    expect(f.outcome).toEqual({ _tag: "Finished" })
    expect(Idem.claim(f.state, A, "k", "fp1", "req_3", 2).outcome).toEqual({ _tag: "Replay", result: ok200, requestId: "req_1" })
    expect(Idem.claim(f.state, A, "k", "fp2", "req_3", 2).outcome).toEqual({ _tag: "Conflict" })
    expect(Idem.claim(c1.state, A, "k", "fp2", "req_3", 2).outcome).toEqual({ _tag: "Conflict" })
  })

  it("release frees the key so a retry runs again; a finished key is never released", () => {
    const c1 = Idem.claim(Idem.empty, A, "k", "fp1", "req_1", 0)
    const r = Idem.release(c1.state, A, "k", "req_1")
    expect(r.outcome).toEqual({ _tag: "Released" })
    expect(Idem.claim(r.state, A, "k", "fp2", "req_2", 1).outcome).toEqual({ _tag: "Claimed" })
    const f = Idem.finish(c1.state, A, "k", "req_1", ok200, 1)
    expect(Idem.release(f.state, A, "k", "req_1").outcome).toEqual({ _tag: "AlreadyFinished" })
    expect(Idem.finish(f.state, A, "k", "req_1", ok200, 2).outcome).toEqual({ _tag: "AlreadyFinished" })
  })

  it("only the owner of a claim may finish or release it", () => {
    const c1 = Idem.claim(Idem.empty, A, "k", "fp1", "req_1", 0)
    expect(Idem.finish(c1.state, A, "k", "req_2", ok200, 1).outcome).toEqual({ _tag: "NotOwner", requestId: "req_1" })
    expect(Idem.release(c1.state, A, "k", "req_2").outcome).toEqual({ _tag: "NotOwner", requestId: "req_1" })
    expect(Idem.finish(Idem.empty, A, "k", "req_1", ok200, 1).outcome).toEqual({ _tag: "UnknownKey" })
  })

  it("a claim lives until the deadline its caller gives (the hold's), then the key is free", () => {
    const c1 = Idem.claim(Idem.empty, A, "k", "fp1", "req_1", 1000, 1000 + HOLD)
    expect(Idem.claim(c1.state, A, "k", "fp1", "req_2", 1000 + HOLD - 1).outcome).toEqual({ _tag: "InFlight", requestId: "req_1" })
    // Past it, the key is free for anyone, and the stale owner can no longer finish.
    const c2 = Idem.claim(c1.state, A, "k", "fp2", "req_2", 1000 + HOLD, 1000 + 2 * HOLD)
    expect(c2.outcome).toEqual({ _tag: "Claimed" })
    expect(Idem.finish(c1.state, A, "k", "req_1", ok200, 1000 + HOLD).outcome).toEqual({ _tag: "UnknownKey" })
    // A stream keeps its claim alive by extending it.
    const e = Idem.extend(c1.state, A, "k", "req_1", 1000 + HOLD - 1, 1000 + 2 * HOLD)
    expect(e.outcome).toEqual({ _tag: "Extended" })
    expect(Idem.claim(e.state, A, "k", "fp1", "req_3", 1000 + HOLD).outcome).toEqual({ _tag: "InFlight", requestId: "req_1" })
  })

  it("a finished result lives its TTL (at least 24 h) from when it finished, and no longer", () => {
    const c1 = Idem.claim(Idem.empty, A, "k", "fp1", "req_1", 1000, 1000 + HOLD)
    const f = Idem.finish(c1.state, A, "k", "req_1", ok200, 2000)
    expect(Idem.claim(f.state, A, "k", "fp1", "req_2", 2000 + DAY - 1).outcome).toEqual({ _tag: "Replay", result: ok200, requestId: "req_1" })
    expect(Idem.claim(f.state, A, "k", "fp2", "req_2", 2000 + DAY).outcome).toEqual({ _tag: "Claimed" })
    expect(Idem.expire(f.state, 2000 + DAY - 1).outcome).toEqual({ _tag: "Expired", removed: 0 })
    expect(Idem.expire(f.state, 2000 + DAY).outcome).toEqual({ _tag: "Expired", removed: 1 })
    expect(Idem.finish(c1.state, A, "k", "req_1", ok200, 2000, DAY - 1)).toEqual({ state: c1.state, outcome: { _tag: "TtlTooShort", ttlMillis: DAY - 1 } })
  })

  it("keys are 1–255 printable characters", () => {
    expect(Idem.isValidKey("order-42")).toBe(true)
    expect(Idem.isValidKey("x".repeat(255))).toBe(true)
    expect(Idem.isValidKey("")).toBe(false)
    expect(Idem.isValidKey("x".repeat(256))).toBe(false)
    expect(Idem.isValidKey("a\nb")).toBe(false)
  })
})

// ---------------------------------------------------------------------------------------------
// Model-based properties over small pools so keys collide often.

const scopes = fc.constantFrom(A, B)
const keys = fc.constantFrom("k1", "k2", "k3")
const fps = fc.constantFrom("fp1", "fp2")
const reqs = fc.constantFrom("req_1", "req_2", "req_3", "req_4")
const results = fc.record({ status: fc.constantFrom(200, 400, 503), body: fc.string({ maxLength: 8 }) })
const time = fc.integer({ min: 0, max: 3 * DAY })

const command: fc.Arbitrary<Idem.Command> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc
      .record({ scope: scopes, key: keys, fingerprint: fps, requestId: reqs, nowMillis: time, lifetime: fc.integer({ min: 1, max: DAY }) })
      .map(({ lifetime, ...c }) => ({ _tag: "Claim" as const, ...c, expiresAtMillis: c.nowMillis + lifetime }))
  },
  {
    weight: 2,
    arbitrary: fc.record({ _tag: fc.constant("Finish" as const), scope: scopes, key: keys, requestId: reqs, result: results, nowMillis: time, ttlMillis: fc.integer({ min: DAY - 10, max: 2 * DAY }) })
  },
  {
    weight: 1,
    arbitrary: fc
      .record({ scope: scopes, key: keys, requestId: reqs, nowMillis: time, lifetime: fc.integer({ min: 1, max: DAY }) })
      .map(({ lifetime, ...c }) => ({ _tag: "Extend" as const, ...c, expiresAtMillis: c.nowMillis + lifetime }))
  },
  { weight: 1, arbitrary: fc.record({ _tag: fc.constant("Release" as const), scope: scopes, key: keys, requestId: reqs }) },
  { weight: 1, arbitrary: fc.record({ _tag: fc.constant("Expire" as const), nowMillis: time }) }
)
const commands = fc.array(command, { maxLength: 40 })
const run = (cs: ReadonlyArray<Idem.Command>): Idem.IdempotencyState => cs.reduce((s, c) => Idem.step(s, c).state, Idem.empty)

describe("idempotency properties", () => {
  it("idempotency: conflict changes nothing (even when in flight)", () => {
    fc.assert(
      fc.property(commands, scopes, keys, reqs, time, (cs, scope, key, req, now) => {
        const s = run(cs)
        const existing = Idem.lookup(s, scope, key, now)
        fc.pre(existing !== undefined)
        const other = existing!.fingerprint === "fp1" ? "fp2" : "fp1"
        const r = Idem.claim(s, scope, key, other, req, now)
        expect(r.outcome).toEqual({ _tag: "Conflict" })
        expect(r.state).toBe(s)
        expect(Idem.lookup(r.state, scope, key)).toEqual(existing)
      }),
      { numRuns }
    )
  })

  it("idempotency: claim outcome follows the rules (free or past its deadline → Claimed, same fp finished → Replay, in flight → InFlight, other fp → Conflict)", () => {
    fc.assert(
      fc.property(commands, (cs) => {
        let s = Idem.empty
        for (const c of cs) {
          const r = Idem.step(s, c)
          if (c._tag === "Claim") {
            const before = Idem.lookup(s, c.scope, c.key, c.nowMillis)
            const expected: Idem.Outcome =
              before === undefined
                ? { _tag: "Claimed" }
                : before.fingerprint !== c.fingerprint
                  ? { _tag: "Conflict" }
                  : before.state === "in_flight"
                    ? { _tag: "InFlight", requestId: before.requestId }
                    : { _tag: "Replay", result: before.result, requestId: before.requestId }
            expect(r.outcome).toEqual(expected)
            if (r.outcome._tag !== "Claimed") expect(r.state).toBe(s)
          }
          s = r.state
        }
      }),
      { numRuns }
    )
  })

  it("idempotency: a finished result is replayed exactly until it expires, and is never overwritten", () => {
    fc.assert(
      fc.property(commands, commands, results, time, (before, after, result, t) => {
        const s0 = Idem.claim(run(before), A, "kx", "fpx", "req_x", t, t + 1)
        fc.pre(s0.outcome._tag === "Claimed")
        const s1 = Idem.finish(s0.state, A, "kx", "req_x", result, t).state
        let s = s1
        for (const c of after) {
          s = Idem.step(s, c).state
          // The pools never touch "kx": only expiry can take the record away, and only after its TTL.
          const rec = Idem.lookup(s, A, "kx")
          if (rec === undefined) {
            expect(c._tag === "Expire" && c.nowMillis >= t + DAY).toBe(true)
            break
          }
          for (const at of [t, t + DAY - 1]) {
            expect(Idem.claim(s, A, "kx", "fpx", "req_y", at).outcome).toEqual({ _tag: "Replay", result, requestId: "req_x" })
            expect(Idem.finish(s, A, "kx", "req_x", { status: 500, body: "" }, at).outcome).toEqual({ _tag: "AlreadyFinished" })
          }
        }
      }),
      { numRuns }
    )
  })

  it("idempotency: scopes are isolated (commands in one tenant never change another's records)", () => {
    fc.assert(
      fc.property(commands, (cs) => {
        let s = Idem.empty
        for (const c of cs) {
          const r = Idem.step(s, c)
          if (c._tag !== "Expire") {
            const other = c.scope === A ? B : A
            for (const k of ["k1", "k2", "k3"]) expect(Idem.lookup(r.state, other, k)).toBe(Idem.lookup(s, other, k))
          }
          s = r.state
        }
      }),
      { numRuns }
    )
  })

  it("idempotency: expire removes exactly the records past their deadline; a finished one lives ≥ 24 h after it finished", () => {
    fc.assert(
      fc.property(commands, time, (cs, now) => {
        const s = run(cs)
        const r = Idem.expire(s, now)
        for (const [k, rec] of s.records) {
          expect(r.state.records.has(k)).toBe(now < rec.expiresAtMillis)
          if (rec.state === "finished") expect(rec.expiresAtMillis - rec.finishedAtMillis).toBeGreaterThanOrEqual(DAY)
        }
        expect(r.outcome).toEqual({ _tag: "Expired", removed: s.records.size - r.state.records.size })
      }),
      { numRuns }
    )
  })

  it("idempotency: a record past its deadline is absent to every read, before any expire runs", () => {
    fc.assert(
      fc.property(commands, scopes, keys, fps, time, (cs, scope, key, fp, now) => {
        const s = run(cs)
        const rec = Idem.lookup(s, scope, key)
        fc.pre(rec !== undefined && now >= rec.expiresAtMillis)
        expect(Idem.claim(s, scope, key, fp, "req_new", now).outcome).toEqual({ _tag: "Claimed" })
      }),
      { numRuns }
    )
  })
})
