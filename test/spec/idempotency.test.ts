import fc from "fast-check"
import { describe, expect, it } from "vitest"
import * as Idem from "../../spec/idempotency.ts"
import { numRuns } from "./runs.ts"

const A: Idem.Scope = { project: "prj_a", environment: "production" }
const B: Idem.Scope = { project: "prj_a", environment: "staging" }
const DAY = Idem.MIN_TTL_MILLIS
const ok200: Idem.StoredResult = { status: 200, body: '{"id":"chatcmpl-1"}' }

describe("idempotency examples", () => {
  it("claim, then in flight, then replay of the stored result", () => {
    const c1 = Idem.claim(Idem.empty, A, "k", "fp1", "req_1", 0)
    expect(c1.outcome).toEqual({ _tag: "Claimed" })
    expect(Idem.claim(c1.state, A, "k", "fp1", "req_2", 1).outcome).toEqual({ _tag: "InFlight", requestId: "req_1" })
    const f = Idem.finish(c1.state, A, "k", "req_1", ok200)
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
    const f = Idem.finish(c1.state, A, "k", "req_1", ok200)
    expect(Idem.release(f.state, A, "k", "req_1").outcome).toEqual({ _tag: "AlreadyFinished" })
    expect(Idem.finish(f.state, A, "k", "req_1", ok200).outcome).toEqual({ _tag: "AlreadyFinished" })
  })

  it("only the owner of a claim may finish or release it", () => {
    const c1 = Idem.claim(Idem.empty, A, "k", "fp1", "req_1", 0)
    expect(Idem.finish(c1.state, A, "k", "req_2", ok200).outcome).toEqual({ _tag: "NotOwner", requestId: "req_1" })
    expect(Idem.release(c1.state, A, "k", "req_2").outcome).toEqual({ _tag: "NotOwner", requestId: "req_1" })
    expect(Idem.finish(Idem.empty, A, "k", "req_1", ok200).outcome).toEqual({ _tag: "UnknownKey" })
  })

  it("records live their TTL (at least 24 h) and no longer", () => {
    const c1 = Idem.claim(Idem.empty, A, "k", "fp1", "req_1", 1000)
    expect(Idem.expire(c1.state, 1000 + DAY - 1).outcome).toEqual({ _tag: "Expired", removed: 0 })
    const gone = Idem.expire(c1.state, 1000 + DAY)
    expect(gone.outcome).toEqual({ _tag: "Expired", removed: 1 })
    expect(Idem.claim(gone.state, A, "k", "fp2", "req_2", 1000 + DAY).outcome).toEqual({ _tag: "Claimed" })
    expect(Idem.expire(c1.state, 10 * DAY, DAY - 1)).toEqual({ state: c1.state, outcome: { _tag: "TtlTooShort", ttlMillis: DAY - 1 } })
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
  { weight: 3, arbitrary: fc.record({ _tag: fc.constant("Claim" as const), scope: scopes, key: keys, fingerprint: fps, requestId: reqs, nowMillis: time }) },
  { weight: 2, arbitrary: fc.record({ _tag: fc.constant("Finish" as const), scope: scopes, key: keys, requestId: reqs, result: results }) },
  { weight: 1, arbitrary: fc.record({ _tag: fc.constant("Release" as const), scope: scopes, key: keys, requestId: reqs }) },
  { weight: 1, arbitrary: fc.record({ _tag: fc.constant("Expire" as const), nowMillis: time, ttlMillis: fc.integer({ min: DAY - 10, max: 2 * DAY }) }) }
)
const commands = fc.array(command, { maxLength: 40 })
const run = (cs: ReadonlyArray<Idem.Command>): Idem.IdempotencyState => cs.reduce((s, c) => Idem.step(s, c).state, Idem.empty)

describe("idempotency properties", () => {
  it("idempotency: conflict changes nothing (even when in flight)", () => {
    fc.assert(
      fc.property(commands, scopes, keys, reqs, time, (cs, scope, key, req, now) => {
        const s = run(cs)
        const existing = Idem.lookup(s, scope, key)
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

  it("idempotency: claim outcome follows the rules (free → Claimed, same fp finished → Replay, in flight → InFlight, other fp → Conflict)", () => {
    fc.assert(
      fc.property(commands, (cs) => {
        let s = Idem.empty
        for (const c of cs) {
          const r = Idem.step(s, c)
          if (c._tag === "Claim") {
            const before = Idem.lookup(s, c.scope, c.key)
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
      fc.property(commands, commands, results, (before, after, result) => {
        const s0 = Idem.claim(run(before), A, "kx", "fpx", "req_x", 0)
        fc.pre(s0.outcome._tag === "Claimed")
        const s1 = Idem.finish(s0.state, A, "kx", "req_x", result).state
        let s = s1
        for (const c of after) {
          s = Idem.step(s, c).state
          // The pools never touch "kx", so only expiry can take the record away.
          const rec = Idem.lookup(s, A, "kx")
          if (rec === undefined) continue
          expect(Idem.claim(s, A, "kx", "fpx", "req_y", 0).outcome).toEqual({ _tag: "Replay", result, requestId: "req_x" })
          expect(Idem.finish(s, A, "kx", "req_x", { status: 500, body: "" }).outcome).toEqual({ _tag: "AlreadyFinished" })
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

  it("idempotency: expire removes exactly the records whose TTL (≥ 24 h) has passed", () => {
    fc.assert(
      fc.property(commands, time, fc.integer({ min: 0, max: 2 * DAY }), (cs, now, ttl) => {
        const s = run(cs)
        const r = Idem.expire(s, now, ttl)
        if (ttl < DAY) {
          expect(r.outcome._tag).toBe("TtlTooShort")
          expect(r.state).toBe(s)
          return
        }
        for (const [k, rec] of s.records) {
          expect(r.state.records.has(k)).toBe(now < rec.createdAtMillis + ttl)
          // Never removed before it has lived at least 24 hours.
          if (now - rec.createdAtMillis < DAY) expect(r.state.records.get(k)).toBe(rec)
        }
      }),
      { numRuns }
    )
  })
})
