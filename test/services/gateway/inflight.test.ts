/**
 * The governed call's lifecycle (src/services/gateway/inflight.ts): the only moves are the table's, a
 * finished call is final, a call is answered once, and the registry holds a call exactly until it is
 * answered and done with its hold. Checked move by move, and as properties over random sequences of
 * moves and answers.
 */
import { describe, expect, it } from "@effect/vitest"
import { Clock, Exit, Runtime } from "effect"
import fc from "fast-check"
import { type Answer, Calls, InFlight, LifecycleViolation, type Phase } from "../../../src/services/gateway/inflight.ts"
import type { ChatCall, Plan } from "../../../src/services/gateway/types.ts"

const PHASES: ReadonlyArray<Phase> = ["planning", "reserving", "reserved", "upstream", "settling", "settled", "voided", "declined"]
/** The lifecycle as docs/architecture.md draws it: written here again, on purpose, to hold the code to it. */
const ALLOWED = new Set([
  "planning>reserving",
  "planning>declined",
  "reserving>reserved",
  "reserving>planning",
  "reserving>declined",
  "reserved>upstream",
  "reserved>voided",
  "upstream>settling",
  "upstream>voided",
  "settling>settled",
  "settling>voided"
])
const FINAL: ReadonlySet<Phase> = new Set(["settled", "voided", "declined"])
const HOLDING: ReadonlySet<Phase> = new Set(["reserved", "upstream", "settling"])

const plan = { requestId: "req_1", hold: { reservationId: "res_1" } } as unknown as Plan
const answer: Answer = Exit.succeed({ _tag: "Body", status: 200, contentType: "application/json", body: "{}" })

/** A call in a fresh registry, and what it reported and delivered. */
const fresh = (strict = false) => {
  const reported: Array<LifecycleViolation> = []
  const delivered: Array<Answer> = []
  const calls = new Calls({ strict, report: (v) => void reported.push(v) })
  const call = { deliver: (a: Answer) => void delivered.push(a) } as unknown as ChatCall
  const f = new InFlight(call, calls, Runtime.defaultRuntime, Clock.make(), undefined)
  calls.add(f)
  return { f, calls, reported, delivered }
}

/** Move `f` to `phase`, with its plan when the move is the reservation's commit. */
const move = (f: InFlight, phase: Phase) => (phase === "reserved" && f.phase === "reserving" ? f.reserved(plan) : f.to(phase))

/** Drive a fresh call along allowed moves to `target` (every phase is reachable). */
const reach = (f: InFlight, target: Phase) => {
  const path: Record<Phase, ReadonlyArray<Phase>> = {
    planning: [],
    reserving: ["reserving"],
    reserved: ["reserving", "reserved"],
    upstream: ["reserving", "reserved", "upstream"],
    settling: ["reserving", "reserved", "upstream", "settling"],
    settled: ["reserving", "reserved", "upstream", "settling", "settled"],
    voided: ["reserving", "reserved", "voided"],
    declined: ["declined"]
  }
  for (const p of path[target]) move(f, p)
}

describe("a governed call's lifecycle", () => {
  it("allows exactly the table's moves: every other move throws a LifecycleViolation, reported, and leaves the phase as it was", () => {
    for (const from of PHASES) {
      for (const to of PHASES) {
        const { f, reported } = fresh()
        reach(f, from)
        const allowed = ALLOWED.has(`${from}>${to}`)
        if (allowed) {
          move(f, to)
          expect(f.phase).toBe(to)
          expect(reported).toEqual([])
        } else {
          expect(() => move(f, to), `${from} → ${to}`).toThrow(LifecycleViolation)
          expect(f.phase).toBe(from)
          expect(reported.map((v) => v.kind)).toEqual(["move"])
        }
      }
    }
  })

  it("a settled call is never voided, nor a voided one settled: the money's two ends exclude each other", () => {
    const settled = fresh()
    reach(settled.f, "settled")
    expect(() => settled.f.to("voided")).toThrow(/from settled to voided/)
    const voided = fresh()
    reach(voided.f, "voided")
    expect(() => voided.f.to("settled")).toThrow(/from voided to settled/)
  })

  it("is answered once: a second answer is dropped and reported (thrown in assertion mode), never delivered", () => {
    const lax = fresh(false)
    lax.f.answer(answer)
    lax.f.answer(answer)
    expect(lax.delivered).toHaveLength(1)
    expect(lax.reported.map((v) => v.kind)).toEqual(["answer"])
    const strict = fresh(true)
    strict.f.answer(answer)
    expect(() => strict.f.answer(answer)).toThrow(LifecycleViolation)
    expect(strict.delivered).toHaveLength(1)
  })

  it("has no plan before its reservation committed, and clears its stop and progress once its hold is done", () => {
    const { f } = fresh()
    expect(() => f.plan).toThrow(LifecycleViolation)
    reach(f, "upstream")
    expect(f.plan).toBe(plan)
    f.stop = () => {}
    f.progress = () => undefined
    f.to("voided")
    expect(f.stop).toBeUndefined()
    expect(f.progress).toBeUndefined()
  })

  it("property: along any sequence of attempted moves and answers, the phase follows the table, a final phase stays, one answer is delivered at most, and the registry holds the call exactly while it is unanswered or not final", () => {
    const step = fc.oneof(fc.constantFrom(...PHASES).map((p) => ({ _tag: "move" as const, p })), fc.constant({ _tag: "answer" as const }))
    fc.assert(
      fc.property(fc.array(step, { maxLength: 30 }), (steps) => {
        const { f, calls, delivered } = fresh(false)
        let phase: Phase = "planning"
        let answered = false
        for (const s of steps) {
          if (s._tag === "answer") {
            f.answer(answer)
            answered = true
          } else {
            const allowed = ALLOWED.has(`${phase}>${s.p}`)
            let threw = false
            try {
              move(f, s.p)
            } catch (e) {
              threw = e instanceof LifecycleViolation
            }
            expect(threw).toBe(!allowed)
            if (allowed) phase = s.p
          }
          expect(f.phase).toBe(phase)
          expect(f.holds).toBe(HOLDING.has(phase))
          expect(delivered).toHaveLength(answered ? 1 : 0)
          expect(calls.size).toBe(answered && FINAL.has(phase) ? 0 : 1)
          expect(calls.holding()).toEqual(HOLDING.has(phase) && calls.size === 1 ? [f] : [])
        }
      }),
      { numRuns: 500 }
    )
  })
})
