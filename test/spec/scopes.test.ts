import fc from "fast-check"
import { describe, expect, it } from "vitest"
import * as Scopes from "../../spec/scopes.ts"
import { numRuns } from "./runs.ts"

const P = "prj_a"
const W = "2026-11"

const run = (...commands: ReadonlyArray<Scopes.Command>) => Scopes.run(Scopes.empty, commands)
const last = <A>(xs: ReadonlyArray<A>): A => xs[xs.length - 1]!
const reserve = (id: string, key: string, amount: number, endUser?: string): Scopes.Command => ({ _tag: "Reserve", id, project: P, key, endUser, window: W, amount })

describe("budgets at every scope: examples", () => {
  it("a call holds in its project, key and end user, and a refusal names the first scope without room", () => {
    const base: ReadonlyArray<Scopes.Command> = [
      { _tag: "SetProjectCap", project: P, cap: 1000, window: W },
      { _tag: "SetKeyCap", key: "key_1", cap: 100, window: W },
      { _tag: "SetEndUserDefault", project: P, cap: 30, window: W }
    ]
    const ok = run(...base, reserve("c1", "key_1", 25, "alice"))
    expect(last(ok.outcomes)).toEqual({ _tag: "Reserved", id: "c1", amount: 25, scopes: ["project", "key", "end_user"] })
    // alice has 5 left: the end user refuses, and nothing was held anywhere for c2.
    const refused = Scopes.step(ok.state, reserve("c2", "key_1", 10, "alice"))
    expect(refused.outcome).toMatchObject({ _tag: "BudgetExceeded", scope: "end_user", cap: 30, spent: 0, reserved: 25, remaining: 5 })
    expect(refused.state).toBe(ok.state)
    // bob has room, the key has 75: the key refuses 80.
    expect(Scopes.step(ok.state, reserve("c3", "key_1", 80, "bob")).outcome).toMatchObject({ _tag: "BudgetExceeded", scope: "key", remaining: 75 })
    // A key without a budget is held without a limit; the project still caps it.
    expect(Scopes.step(ok.state, reserve("c4", "key_2", 976)).outcome).toMatchObject({ _tag: "BudgetExceeded", scope: "project", remaining: 975 })
  })

  it("settle posts one charge to every scope; void releases every scope", () => {
    const r = run(
      { _tag: "SetProjectCap", project: P, cap: 100, window: W },
      reserve("c1", "key_1", 40, "alice"),
      reserve("c2", "key_1", 10, "alice"),
      { _tag: "Settle", id: "c1", charge: 15 },
      { _tag: "Void", id: "c2" }
    )
    expect(r.outcomes.slice(3)).toEqual([
      { _tag: "Settled", id: "c1", charge: 15, released: 25 },
      { _tag: "Voided", id: "c2", released: 10 }
    ])
    for (const scope of Scopes.scopesOf({ project: P, key: "key_1", endUser: "alice" })) {
      expect(Scopes.accountIn(r.state, scope, W)).toMatchObject({ spent: 15, reserved: 0 })
    }
    expect(Scopes.violations(r.state)).toEqual([])
  })

  it("a cap set on a key mid-window counts what the key already spent in it", () => {
    const r = run(
      { _tag: "SetProjectCap", project: P, cap: 1000, window: W },
      reserve("c1", "key_1", 80),
      { _tag: "Settle", id: "c1", charge: 80 },
      { _tag: "SetKeyCap", key: "key_1", cap: 100, window: W },
      reserve("c2", "key_1", 21)
    )
    expect(last(r.outcomes)).toMatchObject({ _tag: "BudgetExceeded", scope: "key", spent: 80, remaining: 20 })
  })

  it("an end user's override beats the project's default, and removing it restores the default", () => {
    const r = run(
      { _tag: "SetProjectCap", project: P, cap: 1000, window: W },
      { _tag: "SetEndUserDefault", project: P, cap: 10, window: W },
      { _tag: "SetEndUserCap", project: P, user: "vip", cap: 500, window: W },
      reserve("c1", "key_1", 400, "vip"),
      { _tag: "SetEndUserCap", project: P, user: "vip", cap: undefined, window: W },
      reserve("c2", "key_1", 1, "vip")
    )
    expect(r.outcomes[3]!._tag).toBe("Reserved")
    // Back on the default of 10 with 400 held: over the cap, grandfathered, and nothing more fits.
    expect(last(r.outcomes)).toMatchObject({ _tag: "BudgetExceeded", scope: "end_user", cap: 10 })
    expect(Scopes.violations(r.state)).toEqual([])
  })

  it("the all-or-none check fires on a call held in only some of its scopes", () => {
    const r = run({ _tag: "SetProjectCap", project: P, cap: 100, window: W }, reserve("c1", "key_1", 10, "alice"))
    const reservations = new Map(r.state.ledger.reservations)
    reservations.delete(Scopes.holdOf("c1", "key"))
    const broken = { ...r.state, ledger: { ...r.state.ledger, reservations } }
    expect(Scopes.violations(broken).map((v) => v.invariant)).toContain("all-or-none")
  })
})

// ---------------------------------------------------------------------------------------------
// Properties: several keys and end users of one project racing for its budgets.

const KEYS = ["key_1", "key_2", "key_3"]
const USERS = ["u1", "u2", "u3", "u4"]
const cap = fc.oneof(fc.integer({ min: 0, max: 60 }), fc.constant(null))

const command = (ids: ReadonlyArray<string>): fc.Arbitrary<Scopes.Command> =>
  fc.oneof(
    { weight: 6, arbitrary: fc.record({ _tag: fc.constant("Reserve" as const), id: fc.constantFrom(...ids), project: fc.constant(P), key: fc.constantFrom(...KEYS), endUser: fc.option(fc.constantFrom(...USERS), { nil: undefined }), window: fc.constantFrom("2026-11", "2026-12"), amount: fc.integer({ min: 0, max: 40 }) }) },
    { weight: 3, arbitrary: fc.record({ _tag: fc.constant("Settle" as const), id: fc.constantFrom(...ids), charge: fc.integer({ min: 0, max: 40 }) }) },
    { weight: 2, arbitrary: fc.record({ _tag: fc.constant("Void" as const), id: fc.constantFrom(...ids) }) },
    { weight: 1, arbitrary: fc.record({ _tag: fc.constant("SetProjectCap" as const), project: fc.constant(P), cap: fc.integer({ min: 0, max: 150 }), window: fc.constant("2026-11") }) },
    { weight: 1, arbitrary: fc.record({ _tag: fc.constant("SetKeyCap" as const), key: fc.constantFrom(...KEYS), cap, window: fc.constant("2026-11") }) },
    { weight: 1, arbitrary: fc.record({ _tag: fc.constant("SetEndUserDefault" as const), project: fc.constant(P), cap, window: fc.constant("2026-11") }) },
    { weight: 1, arbitrary: fc.record({ _tag: fc.constant("SetEndUserCap" as const), project: fc.constant(P), user: fc.constantFrom(...USERS), cap: fc.option(cap, { nil: undefined }), window: fc.constant("2026-11") }) }
  )

const commands = fc.array(command(["c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8"]), { maxLength: 60 })

describe("budgets at every scope: properties", () => {
  it("every scope keeps the ledger's invariants (spent + reserved ≤ cap, held and settled sums) and every call is all-or-none, after every command", () => {
    fc.assert(
      fc.property(commands, (cs) => {
        let s: Scopes.ScopesState = Scopes.empty
        for (const c of cs) {
          s = Scopes.step(s, c).state
          expect(Scopes.violations(s)).toEqual([])
        }
      }),
      { numRuns }
    )
  })

  it("admission: a call is held iff every one of its scopes has room, else the first in project → key → end user order is named and nothing changes", () => {
    fc.assert(
      fc.property(commands, (cs) => {
        let s: Scopes.ScopesState = Scopes.empty
        for (const c of cs) {
          const r = Scopes.step(s, c)
          if (c._tag === "Reserve" && !s.calls.has(c.id)) {
            // An independent reading of the rule: room in a scope is cap − spent − reserved of its window now.
            const lacking = Scopes.scopesOf(c).find((scope) => {
              const a = Scopes.accountIn(s, scope, c.window)
              return a.spent + a.reserved + c.amount > Scopes.capOf(s, scope)
            })
            if (lacking === undefined) expect(r.outcome._tag).toBe("Reserved")
            else {
              expect(r.outcome).toMatchObject({ _tag: "BudgetExceeded", scope: lacking.kind })
              expect(r.state).toBe(s)
            }
          }
          s = r.state
        }
      }),
      { numRuns }
    )
  })

  it("conservation: in every scope, spent is the sum of the charges of the settled calls that name it", () => {
    fc.assert(
      fc.property(commands, (cs) => {
        const { state, outcomes } = Scopes.run(Scopes.empty, cs)
        const charges = new Map<string, number>()
        outcomes.forEach((o) => {
          if (o._tag !== "Settled") return
          for (const scope of state.calls.get(o.id)!.scopes) {
            const window = state.ledger.reservations.get(Scopes.holdOf(o.id, scope.kind))!.period
            const k = `${Scopes.accountOf(scope)}|${window}`
            charges.set(k, (charges.get(k) ?? 0) + o.charge)
          }
        })
        for (const a of state.ledger.accounts.values()) expect(a.spent).toBe(charges.get(`${a.project}|${a.period}`) ?? 0)
      }),
      { numRuns }
    )
  })
})
