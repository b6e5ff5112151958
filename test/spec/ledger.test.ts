import fc from "fast-check"
import { describe, expect, it } from "vitest"
import * as Ledger from "../../spec/ledger.ts"
import { numRuns } from "./runs.ts"

const P = "prj_a"
const NOV = "2026-11"

/** Apply commands in order, failing the test if one is refused. */
const given = (...commands: ReadonlyArray<Ledger.Command>): Ledger.LedgerState =>
  commands.reduce((s, c) => {
    const r = Ledger.step(s, c)
    if (/Exceeded|Duplicate|Already|Unknown|Invalid|ChargeExceeds/.test(r.outcome._tag)) throw new Error(r.outcome._tag)
    return r.state
  }, Ledger.empty)

const account = (s: Ledger.LedgerState, project = P, period = NOV) => Ledger.accountOf(s, project, period)

describe("ledger examples", () => {
  it("periodOf is the UTC calendar month", () => {
    const lastMs = Date.UTC(2026, 10, 30, 23, 59, 59, 999)
    expect(Ledger.periodOf(lastMs)).toBe("2026-11")
    expect(Ledger.periodOf(lastMs + 1)).toBe("2026-12")
    expect(Ledger.periodOf(Date.UTC(2026, 11, 31, 23, 59, 59, 999) + 1)).toBe("2027-01")
    expect(Ledger.periodBounds("2026-12")).toEqual({ startMillis: Date.UTC(2026, 11, 1), endMillis: Date.UTC(2027, 0, 1) })
  })

  it("reserves within the cap and refuses beyond it", () => {
    const s = given({ _tag: "SetCap", project: P, cap: 100, period: NOV })
    const ok = Ledger.reserve(s, "r1", P, NOV, 60)
    expect(ok.outcome).toEqual({ _tag: "Reserved", id: "r1", amount: 60, remaining: 40 })
    expect(Ledger.reserve(ok.state, "r2", P, NOV, 41).outcome).toEqual({
      _tag: "BudgetExceeded",
      amount: 41,
      cap: 100,
      spent: 0,
      reserved: 60,
      remaining: 40
    })
    expect(Ledger.reserve(ok.state, "r2", P, NOV, 40).outcome._tag).toBe("Reserved")
    expect(Ledger.reserve(ok.state, "r1", P, NOV, 1).outcome).toEqual({ _tag: "DuplicateReservation", id: "r1" })
  })

  it("settle posts the charge and releases the rest, once", () => {
    const s = given({ _tag: "SetCap", project: P, cap: 100, period: NOV }, { _tag: "Reserve", id: "r1", project: P, period: NOV, amount: 60 })
    const settled = Ledger.settle(s, "r1", 25)
    expect(settled.outcome).toEqual({ _tag: "Settled", id: "r1", charge: 25, released: 35 })
    expect(account(settled.state)).toMatchObject({ cap: 100, spent: 25, reserved: 0 })
    expect(Ledger.settle(settled.state, "r1", 25).outcome).toEqual({ _tag: "AlreadyResolved", id: "r1", state: "settled" })
    expect(Ledger.voidReservation(settled.state, "r1").outcome).toEqual({ _tag: "AlreadyResolved", id: "r1", state: "settled" })
    expect(Ledger.settle(s, "r1", 61).outcome).toEqual({ _tag: "ChargeExceedsReservation", id: "r1", charge: 61, amount: 60 })
    expect(Ledger.settle(s, "nope", 1).outcome).toEqual({ _tag: "UnknownReservation", id: "nope" })
  })

  it("void releases everything, once", () => {
    const s = given({ _tag: "SetCap", project: P, cap: 100, period: NOV }, { _tag: "Reserve", id: "r1", project: P, period: NOV, amount: 60 })
    const voided = Ledger.voidReservation(s, "r1")
    expect(voided.outcome).toEqual({ _tag: "Voided", id: "r1", released: 60 })
    expect(account(voided.state)).toMatchObject({ spent: 0, reserved: 0 })
    expect(Ledger.voidReservation(voided.state, "r1").outcome).toEqual({ _tag: "AlreadyResolved", id: "r1", state: "voided" })
    expect(Ledger.reserve(voided.state, "r1", P, NOV, 1).outcome._tag).toBe("DuplicateReservation")
  })

  it("a new window starts empty with the project's cap", () => {
    const s = given(
      { _tag: "SetCap", project: P, cap: 100, period: "2026-10" },
      { _tag: "Reserve", id: "r1", project: P, period: "2026-10", amount: 90 },
      { _tag: "Settle", id: "r1", charge: 90 }
    )
    expect(Ledger.remaining(s, P, "2026-10")).toBe(10)
    expect(account(s)).toMatchObject({ cap: 100, spent: 0, reserved: 0 })
    expect(Ledger.reserve(s, "r2", P, NOV, 100).outcome._tag).toBe("Reserved")
  })

  it("a cap change applies from its window on, not to closed windows", () => {
    const s = given(
      { _tag: "SetCap", project: P, cap: 100, period: "2026-10" },
      { _tag: "Reserve", id: "r1", project: P, period: "2026-10", amount: 1 },
      { _tag: "SetCap", project: P, cap: 50, period: NOV }
    )
    expect(Ledger.accountOf(s, P, "2026-10").cap).toBe(100)
    expect(Ledger.accountOf(s, P, NOV).cap).toBe(50)
    expect(Ledger.accountOf(s, P, "2027-01").cap).toBe(50)
  })

  it("a cap lowered below spent is allowed, but then no reservation succeeds, not even of 0", () => {
    const s = given(
      { _tag: "SetCap", project: P, cap: 100, period: NOV },
      { _tag: "Reserve", id: "r1", project: P, period: NOV, amount: 80 },
      { _tag: "Settle", id: "r1", charge: 80 },
      { _tag: "Reserve", id: "r2", project: P, period: NOV, amount: 20 },
      { _tag: "SetCap", project: P, cap: 50, period: NOV }
    )
    expect(Ledger.invariants(s)).toEqual([])
    expect(Ledger.remaining(s, P, NOV)).toBe(0)
    expect(Ledger.reserve(s, "r3", P, NOV, 0).outcome._tag).toBe("BudgetExceeded")
    const after = Ledger.settle(s, "r2", 5).state
    expect(Ledger.invariants(after)).toEqual([])
    expect(Ledger.reserve(after, "r3", P, NOV, 1).outcome._tag).toBe("BudgetExceeded")
  })

  it("an unknown project can spend nothing", () => {
    expect(Ledger.reserve(Ledger.empty, "r1", "prj_x", NOV, 1).outcome._tag).toBe("BudgetExceeded")
  })

  it("refuses amounts that are not whole non-negative Credits", () => {
    const s = given({ _tag: "SetCap", project: P, cap: 100, period: NOV }, { _tag: "Reserve", id: "r1", project: P, period: NOV, amount: 10 })
    expect(Ledger.reserve(s, "r2", P, NOV, -1).outcome._tag).toBe("InvalidAmount")
    expect(Ledger.reserve(s, "r2", P, NOV, 1.5).outcome._tag).toBe("InvalidAmount")
    expect(Ledger.settle(s, "r1", -1).outcome._tag).toBe("InvalidAmount")
    expect(Ledger.setCap(s, P, Number.NaN, NOV).outcome._tag).toBe("InvalidAmount")
  })
})

// ---------------------------------------------------------------------------------------------
// Model-based properties: small pools of ids, projects and windows so commands collide often.

const ids = fc.constantFrom("r1", "r2", "r3", "r4", "r5", "r6")
const projects = fc.constantFrom("prj_a", "prj_b")
const periods = fc.constantFrom("2026-10", "2026-11", "2026-12")
const credits = fc.oneof({ weight: 9, arbitrary: fc.integer({ min: 0, max: 60 }) }, { weight: 1, arbitrary: fc.constantFrom(-1, 2.5) })

const command: fc.Arbitrary<Ledger.Command> = fc.oneof(
  fc.record({ _tag: fc.constant("SetCap" as const), project: projects, cap: fc.integer({ min: 0, max: 150 }), period: periods }),
  fc.record({ _tag: fc.constant("Reserve" as const), id: ids, project: projects, period: periods, amount: credits }),
  fc.record({ _tag: fc.constant("Reserve" as const), id: ids, project: projects, period: periods, amount: credits }),
  fc.record({ _tag: fc.constant("Settle" as const), id: ids, charge: credits }),
  fc.record({ _tag: fc.constant("Void" as const), id: ids })
)
const commands = fc.array(command, { maxLength: 40 })

const succeeded = (o: Ledger.Outcome): boolean => ["CapSet", "Reserved", "Settled", "Voided"].includes(o._tag)

describe("ledger properties", () => {
  it("ledger: invariants hold after any command sequence", () => {
    fc.assert(
      fc.property(commands, (cs) => {
        let s = Ledger.empty
        for (const c of cs) {
          s = Ledger.step(s, c).state
          expect(Ledger.invariants(s)).toEqual([])
        }
      }),
      { numRuns }
    )
  })

  it("ledger: a reservation is admitted iff spent + reserved + amount ≤ cap, and then spent + reserved ≤ cap", () => {
    fc.assert(
      fc.property(commands, (cs) => {
        let s = Ledger.empty
        for (const c of cs) {
          const before = s
          const r = Ledger.step(s, c)
          s = r.state
          if (c._tag !== "Reserve" || !Number.isSafeInteger(c.amount) || c.amount < 0 || before.reservations.has(c.id)) continue
          const a = Ledger.accountOf(before, c.project, c.period)
          expect(r.outcome._tag).toBe(a.spent + a.reserved + c.amount <= a.cap ? "Reserved" : "BudgetExceeded")
          const after = Ledger.accountOf(s, c.project, c.period)
          if (r.outcome._tag === "Reserved") expect(after.spent + after.reserved).toBeLessThanOrEqual(after.cap)
        }
      }),
      { numRuns }
    )
  })

  it("ledger: settle/void at most once", () => {
    fc.assert(
      fc.property(commands, (cs) => {
        let s = Ledger.empty
        const resolved = new Map<string, number>()
        for (const c of cs) {
          const r = Ledger.step(s, c)
          if (r.outcome._tag === "Settled" || r.outcome._tag === "Voided") {
            resolved.set(r.outcome.id, (resolved.get(r.outcome.id) ?? 0) + 1)
          }
          if ((c._tag === "Settle" || c._tag === "Void") && s.reservations.get(c.id)?.state !== undefined && s.reservations.get(c.id)?.state !== "held") {
            expect(r.outcome._tag).toBe("AlreadyResolved")
          }
          s = r.state
        }
        for (const n of resolved.values()) expect(n).toBe(1)
      }),
      { numRuns }
    )
  })

  it("ledger: a refused command changes nothing", () => {
    fc.assert(
      fc.property(commands, (cs) => {
        let s = Ledger.empty
        for (const c of cs) {
          const r = Ledger.step(s, c)
          if (!succeeded(r.outcome)) expect(r.state).toBe(s)
          s = r.state
        }
      }),
      { numRuns }
    )
  })

  it("ledger: every Credit is accounted for: Σ reserved amounts = spent + reserved + released", () => {
    fc.assert(
      fc.property(commands, (cs) => {
        let s = Ledger.empty
        let held = 0
        let released = 0
        for (const c of cs) {
          const r = Ledger.step(s, c)
          s = r.state
          if (r.outcome._tag === "Reserved") held += r.outcome.amount
          if (r.outcome._tag === "Settled" || r.outcome._tag === "Voided") released += r.outcome.released
        }
        let spent = 0
        let reserved = 0
        for (const a of s.accounts.values()) {
          spent += a.spent
          reserved += a.reserved
        }
        expect(held).toBe(spent + reserved + released)
      }),
      { numRuns }
    )
  })

  it("ledger: invariants detect a tampered ledger (the checker can fail)", () => {
    const somethingReserved = commands.map((cs) => Ledger.run(Ledger.empty, cs).state).filter((s) => s.journal.length > 0)
    fc.assert(
      fc.property(somethingReserved, fc.integer({ min: 1, max: 10 }), (s, delta) => {
        const [key, a] = [...s.accounts].find(([k]) => s.journal.some((e) => Ledger.accountKey(e.project, e.period) === k))!
        const withAccount = (b: Ledger.Account): Ledger.LedgerState => ({ ...s, accounts: new Map(s.accounts).set(key, b) })
        expect(Ledger.invariants(withAccount({ ...a, spent: a.spent + delta }))).toContain("spent-equals-settled")
        expect(Ledger.invariants(withAccount({ ...a, reserved: a.reserved + delta }))).toContain("reserved-equals-held")
        expect(Ledger.invariants(withAccount({ ...a, cap: a.spent + a.reserved - delta, grandfathered: 0 }))).toContain(
          a.spent + a.reserved - delta < 0 ? "non-negative" : "no-overspend"
        )
        const last = s.journal.at(-1)!
        const replayed = { ...s, journal: [...s.journal, { ...last, kind: "void" as const }] }
        expect(Ledger.invariants(replayed)).toContain("resolved-at-most-once")
      }),
      { numRuns }
    )
  })

  it("ledger: periodOf maps every instant into its window's bounds", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: Date.UTC(9999, 11, 1) - 1 }), (ms) => {
        const p = Ledger.periodOf(ms)
        expect(Ledger.isPeriod(p)).toBe(true)
        const { startMillis, endMillis } = Ledger.periodBounds(p)
        expect(startMillis <= ms && ms < endMillis).toBe(true)
        expect(Ledger.periodOf(startMillis)).toBe(p)
        expect(Ledger.periodOf(endMillis - 1)).toBe(p)
        expect(Ledger.periodOf(endMillis) > p).toBe(true)
      }),
      { numRuns }
    )
  })
})
