/**
 * Model-based test of budgets at every scope (issue 41) — the store port's reserve / settle / abandon
 * as production runs them (the store worker on a SQLite file; PostgreSQL's functions) against
 * spec/scopes.ts, on each engine of `modelEngines`.
 *
 * One project, three keys and four end users of it (and calls naming none); caps set, changed and
 * removed mid-run at every scope (the project's budget, a key's budget_credits, the project's
 * end_user_budget_credits, an end user's override, or its removal); reservations one at a time and
 * racing. After every command:
 *   - every scope's window in the store (budget_windows for the project, scope_windows for a key or
 *     an end user) equals the model's account: spent, reserved;
 *   - no overspend in any scope: spent + reserved ≤ cap (but for commitments made before a cap was
 *     lowered, the ledger's grandfathering);
 *   - Σ receipts charged to a scope (by the hold's key and end user) = the scope's spent, and each
 *     receipt names the key and end user of its hold;
 *   - a refused reservation names the model's first scope without room (`param`), and holds nothing.
 */
import { Effect, Exit } from "effect"
import fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as Scopes from "../../spec/scopes.ts"
import { Projects } from "../../src/services/Projects.ts"
import { ChatStore } from "../../src/store/ChatStore.ts"
import type { ReserveArgs } from "../../src/store/chatTransactions.ts"
import { reserveArgs, settleArgs } from "../support/portArgs.ts"
import { assertProperty } from "./support/assert.ts"
import { Coverage } from "./support/coverage.ts"
import { maxCommands, pgPortRuns, portRuns, propertyTimeoutMs } from "./support/profile.ts"
import { makePortRuntime, modelEngines, type PortRuntime, run, runExit, RuntimePool, select, yieldBudgets } from "./support/runtime.ts"

const PERIODS = ["2026-11", "2026-12"] as const
const NEVER = 8.64e15
const KEYS = 3
const USERS = ["u0", "u1", "u2", "u3"] as const

interface Model {
  state: Scopes.ScopesState
}
interface Real {
  readonly rt: PortRuntime
  readonly coverage: Coverage
  readonly project: string
  readonly keys: ReadonlyArray<string>
  readonly holds: Map<string, { readonly args: ReserveArgs; readonly amount: number }>
  nextId: () => string
}
type Command = fc.AsyncCommand<Model, Real>

const exec = (text: string, ...params: ReadonlyArray<unknown>) => Effect.asVoid(select(text, ...params))

const keyOf = (r: Real, k: number | undefined) => (k === undefined ? undefined : r.keys[k])
const userOf = (u: number | undefined) => (u === undefined ? undefined : USERS[u])

interface ScopeRow { scope: string; period: string; spent: number; reserved: number }

const checkInvariants = async (m: Model, r: Real): Promise<void> => {
  expect(Scopes.violations(m.state)).toEqual([])
  const [project, scoped, charged, bodies] = await run(
    r.rt,
    Effect.all([
      select<ScopeRow>("SELECT 'project:' || project_id AS scope, period, spent, reserved FROM budget_windows WHERE project_id = ?", r.project),
      select<ScopeRow>(
        `SELECT scope, period, spent, reserved FROM scope_windows WHERE scope LIKE ? OR scope IN (${r.keys.map(() => "?").join(",")})`,
        `end_user:${r.project}/%`,
        ...r.keys.map((k) => `key:${k}`)
      ),
      select<{ key_id: string | null; end_user: string | null; period: string; charged: number | string }>(
        `SELECT h.key_id, h.end_user, h.period, SUM(c.credits_charged) AS charged FROM receipts c JOIN reservations h ON h.request_id = c.request_id
         WHERE h.project_id = ? GROUP BY h.key_id, h.end_user, h.period`,
        r.project
      ),
      select<{ body: string; key_id: string | null; end_user: string | null }>(
        "SELECT c.body, h.key_id, h.end_user FROM receipts c JOIN reservations h ON h.request_id = c.request_id WHERE h.project_id = ?",
        r.project
      )
    ])
  )
  const rows = new Map([...project, ...scoped].map((w) => [`${w.scope}|${w.period}`, w]))
  // Σ receipts per scope, from the holds' scopes.
  const receiptSum = new Map<string, number>()
  const add = (scope: string, period: string, n: number) => receiptSum.set(`${scope}|${period}`, (receiptSum.get(`${scope}|${period}`) ?? 0) + n)
  for (const c of charged) {
    const n = Number(c.charged)
    add(`project:${r.project}`, c.period, n)
    if (c.key_id !== null) add(`key:${c.key_id}`, c.period, n)
    if (c.end_user !== null) add(`end_user:${r.project}/${c.end_user}`, c.period, n)
  }
  const scopes: Array<Scopes.Scope> = [
    { kind: "project", id: r.project },
    ...r.keys.map((id) => ({ kind: "key" as const, id })),
    ...USERS.map((u) => ({ kind: "end_user" as const, id: Scopes.endUserScopeId(r.project, u) }))
  ]
  for (const scope of scopes) {
    for (const period of PERIODS) {
      const name = Scopes.accountOf(scope)
      const a = Scopes.accountIn(m.state, scope, period)
      const row = rows.get(`${name}|${period}`)
      const real = { scope: name, period, spent: Number(row?.spent ?? 0), reserved: Number(row?.reserved ?? 0) }
      expect(real, "the store's window equals the model's account").toEqual({ scope: name, period, spent: a.spent, reserved: a.reserved })
      expect(real.spent + real.reserved, `no overspend in ${name}`).toBeLessThanOrEqual(Math.max(a.cap, a.grandfathered))
      expect(receiptSum.get(`${name}|${period}`) ?? 0, `Σ receipts = spent in ${name} ${period}`).toBe(real.spent)
    }
  }
  for (const b of bodies) {
    const body = JSON.parse(b.body) as { key_id?: string; end_user?: string }
    expect({ key_id: body.key_id ?? null, end_user: body.end_user ?? null }).toEqual({ key_id: b.key_id, end_user: b.end_user })
  }
}

/** A cap: a number, or none (null). */
const capArb = fc.oneof(fc.integer({ min: 0, max: 600 }), fc.constantFrom(0, 50, 200), fc.constant(null))

class SetCap implements Command {
  constructor(readonly kind: "project" | "key" | "default" | "user", readonly index: number, readonly cap: number | null | undefined) {}
  check = () => true as const
  async run(m: Model, r: Real): Promise<void> {
    const window = PERIODS[0]
    let command: Scopes.Command
    switch (this.kind) {
      case "project": {
        const cap = this.cap ?? 0
        await run(r.rt, Effect.flatMap(Projects, (p) => p.update(r.project, { budget_credits: cap })))
        command = { _tag: "SetProjectCap", project: r.project, cap, window }
        break
      }
      case "key":
        await run(r.rt, exec("UPDATE api_keys SET budget_credits = ? WHERE id = ?", this.cap ?? null, r.keys[this.index]!))
        command = { _tag: "SetKeyCap", key: r.keys[this.index]!, cap: this.cap ?? null, window }
        break
      case "default":
        await run(r.rt, exec("UPDATE projects SET end_user_budget_credits = ? WHERE id = ?", this.cap ?? null, r.project))
        command = { _tag: "SetEndUserDefault", project: r.project, cap: this.cap ?? null, window }
        break
      case "user": {
        const user = USERS[this.index]!
        await run(
          r.rt,
          this.cap === undefined
            ? exec("DELETE FROM end_users WHERE project_id = ? AND end_user = ?", r.project, user)
            : exec(
                `INSERT INTO end_users (project_id, end_user, budget_credits, created_at, updated_at) VALUES (?, ?, ?, 0, 0)
                 ON CONFLICT (project_id, end_user) DO UPDATE SET budget_credits = excluded.budget_credits`,
                r.project,
                user,
                this.cap
              )
        )
        command = { _tag: "SetEndUserCap", project: r.project, user, cap: this.cap, window }
        break
      }
    }
    const step = Scopes.step(m.state, command)
    expect(step.outcome._tag).toBe("CapSet")
    m.state = step.state
    r.coverage.hit(`SetCap(${this.kind})`)
    await checkInvariants(m, r)
  }
  toString = () => `SetCap(${this.kind}${this.kind === "project" || this.kind === "default" ? "" : this.index}, ${this.cap})`
}

interface Call {
  readonly key: number
  readonly user: number | undefined
  readonly period: number
  readonly amount: number
}
const callArb = fc.record({
  key: fc.integer({ min: 0, max: KEYS - 1 }),
  user: fc.option(fc.integer({ min: 0, max: USERS.length - 1 }), { nil: undefined }),
  period: fc.integer({ min: 0, max: 1 }),
  amount: fc.oneof(fc.integer({ min: 0, max: 300 }), fc.constantFrom(0, 1, 50, 200))
})
const showCall = (c: Call) => `k${c.key}${c.user === undefined ? "" : `/u${c.user}`}@${PERIODS[c.period]}:${c.amount}`

const argsOf = (r: Real, c: Call): ReserveArgs => {
  const id = r.nextId()
  const endUser = userOf(c.user)
  return reserveArgs(r.project, c.amount, {
    now: Date.now(),
    period: PERIODS[c.period]!,
    deadline: NEVER,
    ids: { reservationId: `rsv_${id}`, requestId: `req_${id}` },
    keyId: keyOf(r, c.key)!,
    ...(endUser === undefined ? {} : { endUser })
  })
}
const modelReserve = (r: Real, args: ReserveArgs, c: Call): Extract<Scopes.Command, { _tag: "Reserve" }> => ({
  _tag: "Reserve",
  id: args.hold.reservationId,
  project: r.project,
  key: args.hold.keyId!,
  endUser: args.hold.endUser,
  window: PERIODS[c.period]!,
  amount: c.amount
})

class Reserve implements Command {
  constructor(readonly call: Call) {}
  check = () => true as const
  async run(m: Model, r: Real): Promise<void> {
    const args = argsOf(r, this.call)
    const exit = await runExit(r.rt, Effect.flatMap(ChatStore, (s) => s.reserve(args)))
    const step = Scopes.reserve(m.state, modelReserve(r, args, this.call))
    const outcome = step.outcome
    r.coverage.hit("Reserve", outcome._tag === "BudgetExceeded" ? `refused by ${outcome.scope}` : outcome._tag)
    if (outcome._tag === "Reserved") {
      expect(Exit.isSuccess(exit), `${showCall(this.call)} should be held: ${String(exit)}`).toBe(true)
      r.holds.set(args.hold.reservationId, { args, amount: this.call.amount })
    } else {
      expect(outcome._tag).toBe("BudgetExceeded")
      const refused = Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error : undefined
      expect(refused, `${showCall(this.call)} should be refused: ${String(exit)}`).toMatchObject({
        _tag: "OverBudget",
        param: (outcome as Extract<Scopes.Outcome, { _tag: "BudgetExceeded" }>).scope
      })
    }
    m.state = step.state
    await checkInvariants(m, r)
  }
  toString = () => `Reserve(${showCall(this.call)})`
}

/** Racing reservations of several keys and end users: linearizable as "the admitted first, the refused after". */
class ConcurrentReserve implements Command {
  constructor(readonly calls: ReadonlyArray<Call>, readonly opsBeforeYield: number) {}
  check = () => true as const
  async run(m: Model, r: Real): Promise<void> {
    const args = this.calls.map((c) => argsOf(r, c))
    const exits = await Promise.all(args.map((a) => runExit(r.rt, Effect.flatMap(ChatStore, (s) => s.reserve(a)).pipe(Effect.withMaxOpsBeforeYield(this.opsBeforeYield)))))
    for (const e of exits) expect(Exit.isSuccess(e) || (e.cause._tag === "Fail" && e.cause.error._tag === "OverBudget"), String(e)).toBe(true)
    const order = [...args.keys()].sort((i, j) => Number(Exit.isFailure(exits[i]!)) - Number(Exit.isFailure(exits[j]!)))
    let state = m.state
    for (const i of order) {
      const step = Scopes.reserve(state, modelReserve(r, args[i]!, this.calls[i]!))
      const admitted = Exit.isSuccess(exits[i]!)
      expect(step.outcome._tag, `no serial order explains ${admitted ? "holding" : "refusing"} ${showCall(this.calls[i]!)}`).toBe(admitted ? "Reserved" : "BudgetExceeded")
      if (admitted) r.holds.set(args[i]!.hold.reservationId, { args: args[i]!, amount: this.calls[i]!.amount })
      state = step.state
    }
    m.state = state
    const held = exits.filter(Exit.isSuccess).length
    r.coverage.hit("ConcurrentReserve", held === exits.length ? "AllHeld" : held === 0 ? "AllRefused" : "Mixed")
    await checkInvariants(m, r)
  }
  toString = () => `ConcurrentReserve([${this.calls.map(showCall)}], yield/${this.opsBeforeYield})`
}

const heldIds = (m: Model): ReadonlyArray<string> => [...m.state.calls.keys()]

class Settle implements Command {
  constructor(readonly pick: number, readonly charge: number) {}
  check = (m: Readonly<Model>) => heldIds(m as Model).length > 0
  async run(m: Model, r: Real): Promise<void> {
    const ids = heldIds(m)
    const id = ids[this.pick % ids.length]!
    const hold = r.holds.get(id)!
    const charge = Math.min(this.charge, hold.amount)
    const step = Scopes.settle(m.state, id, charge)
    r.coverage.hit("Settle", step.outcome._tag)
    if (step.outcome._tag === "Settled") {
      await run(r.rt, Effect.flatMap(ChatStore, (s) => s.settle(settleArgs(hold.args, hold.amount, charge))))
      m.state = step.state
    }
    await checkInvariants(m, r)
  }
  toString = () => `Settle(#${this.pick}, ${this.charge})`
}

class Void implements Command {
  constructor(readonly pick: number) {}
  check = (m: Readonly<Model>) => heldIds(m as Model).length > 0
  async run(m: Model, r: Real): Promise<void> {
    const ids = heldIds(m)
    const id = ids[this.pick % ids.length]!
    const hold = r.holds.get(id)!
    const step = Scopes.voidCall(m.state, id)
    r.coverage.hit("Void", step.outcome._tag)
    if (step.outcome._tag === "Voided") {
      await run(
        r.rt,
        Effect.flatMap(ChatStore, (s) =>
          s.abandon({ now: Date.now(), reservationId: id, requestId: hold.args.request.id, code: "upstream_error", message: "model void", attempts: [], idempotent: undefined })
        )
      )
      m.state = step.state
    }
    await checkInvariants(m, r)
  }
  toString = () => `Void(#${this.pick})`
}

const pick = fc.nat({ max: 1_000 })
const commands = fc.commands(
  [
    fc.tuple(fc.constantFrom("project" as const, "key" as const, "default" as const, "user" as const), fc.nat({ max: 3 }), capArb).map(
      ([kind, i, cap]) => new SetCap(kind, kind === "key" ? i % KEYS : i, kind === "project" ? (cap ?? 0) : cap)
    ),
    fc.tuple(fc.nat({ max: 3 }), fc.constant(undefined)).map(([i]) => new SetCap("user", i, undefined)),
    callArb.map((c) => new Reserve(c)),
    callArb.map((c) => new Reserve(c)),
    callArb.map((c) => new Reserve(c)),
    fc.tuple(pick, fc.integer({ min: 0, max: 300 })).map(([i, c]) => new Settle(i, c)),
    fc.tuple(pick, fc.integer({ min: 0, max: 300 })).map(([i, c]) => new Settle(i, c)),
    pick.map((i) => new Void(i)),
    fc.tuple(fc.array(callArb, { minLength: 2, maxLength: 6 }), fc.constantFrom(...yieldBudgets)).map(([cs, y]) => new ConcurrentReserve(cs, y))
  ],
  { maxCommands, size: "+1" }
)

let counter = 0
const setup = (pool: RuntimePool<PortRuntime>, coverage: Coverage, projectCap: number, keyCaps: ReadonlyArray<number | null>, endUserDefault: number | null) => async () => {
  const rt = pool.next()
  const run_ = ++counter
  const project = await run(
    rt,
    Effect.map(
      Effect.flatMap(Projects, (p) => p.create({ name: `scopes-model-${run_}`, budget_credits: projectCap, rate_limit: { requests_per_minute: 60 } })),
      (x) => x.id
    )
  )
  const keys = keyCaps.map((_, i) => `key_sm${run_}_${i}`)
  await run(
    rt,
    Effect.forEach(keys, (id, i) =>
      exec(
        "INSERT INTO api_keys (id, project_id, environment, secret_sha256, created_at, budget_credits) VALUES (?, ?, 'development', ?, 0, ?)",
        id,
        project,
        `sha-${id}`,
        keyCaps[i] ?? null
      )
    )
  )
  await run(rt, exec("UPDATE projects SET end_user_budget_credits = ? WHERE id = ?", endUserDefault, project))
  let state = Scopes.step(Scopes.empty, { _tag: "SetProjectCap", project, cap: projectCap, window: PERIODS[0] }).state
  state = Scopes.step(state, { _tag: "SetEndUserDefault", project, cap: endUserDefault, window: PERIODS[0] }).state
  for (const [i, cap] of keyCaps.entries()) state = Scopes.step(state, { _tag: "SetKeyCap", key: keys[i]!, cap, window: PERIODS[0] }).state
  coverage.runs++
  const real: Real = { rt, coverage, project, keys, holds: new Map(), nextId: () => `sm${run_}_${++counter}` }
  return { model: { state } satisfies Model, real }
}

describe.each(modelEngines)("budgets at every scope through the store port (%s) follow spec/scopes.ts", (engine) => {
  const runs = engine === "pg" ? pgPortRuns : portRuns
  let pool: RuntimePool<PortRuntime>
  beforeAll(() => {
    pool = new RuntimePool(() => makePortRuntime(engine))
  })
  afterAll(() => pool.dispose())

  it(
    "keys and end users of one project, caps set and removed, calls one by one and racing: each scope's window is the model's, never over its cap, Σ receipts = spent, a refusal names the first scope without room",
    async () => {
      const coverage = new Coverage(`Scopes on ${engine}`)
      const edges = ["Reserve:Reserved", "Reserve:refused by project", "Reserve:refused by key", "Reserve:refused by end_user"]
      // The runs are random (a fresh seed each time): on PostgreSQL's 15 an edge can go unmet by chance
      // (the end user's refusal was met 0–12 times in 15 runs). Until every edge is met, the property
      // runs again, at most 4 times its runs — more runs of the same property, never fewer checks.
      let done = 0
      do {
        await assertProperty(
          "Scopes",
          fc.asyncProperty(
            fc.integer({ min: 0, max: 1_500 }),
            fc.array(capArb, { minLength: KEYS, maxLength: KEYS }),
            // End users' edge from the start in most runs: a small default for all of them.
            fc.oneof(fc.integer({ min: 0, max: 120 }), fc.constant(null)),
            commands,
            (projectCap, keyCaps, endUserDefault, cmds) => fc.asyncModelRun(setup(pool, coverage, projectCap, keyCaps, endUserDefault), cmds)
          ),
          runs
        )
        done += runs
      } while (done < 4 * runs && edges.some((hit) => coverage.count(hit) === 0))
      // Every scope's edge was met: a refusal by each scope, and holds admitted.
      for (const hit of edges) {
        expect(coverage.count(hit), `${hit} in ${done} runs`).toBeGreaterThan(0)
      }
      process.stdout.write(coverage.report() + "\n")
    },
    propertyTimeoutMs * 3
  )
})

