/**
 * Budgets at every scope (issue 41, DESIGN §9): one call's money held in the project, its key and its
 * end user at once, all or none.
 *
 * Each scope is an account of the ledger (spec/ledger.ts) and keeps that ledger's rules, so every scope
 * has the same guarantee as the project always had: spent + reserved ≤ cap at every instant, each hold
 * resolved once, spent = Σ settled charges. This module adds what is new:
 *
 *   - which scopes a call is held in: its project, always; its key, always; its end user (the body's
 *     `user`, else `metadata.end_user`) when it names one;
 *   - each scope's cap: the project's budget; the key's `budget_credits`; the end user's override, else
 *     the project's `end_user_budget_credits`; a key or end user with neither is held without a limit
 *     (so its spending is known the day a cap is set, and the cap counts it);
 *   - all or none: a call's hold is admitted only if every scope has room for it, and then taken in
 *     every scope; a refusal names the first scope without room, in the order project, key, end user
 *     (a 402's `param`) and changes nothing;
 *   - settle and void resolve the call in every scope it holds, with one charge.
 *
 * Windows: every scope of a project uses the project's budget period (spec/periods.ts); a command
 * carries the window label of the call's start.
 */
import * as Ledger from "./ledger.ts"

export type ScopeKind = "project" | "key" | "end_user"

/** The order in which scopes are checked: a refusal names the first that has no room. */
export const SCOPE_ORDER: ReadonlyArray<ScopeKind> = ["project", "key", "end_user"]

export interface Scope {
  readonly kind: ScopeKind
  /** A project id, a key id, or for an end user `<project id>/<user>` (end users are named per project). */
  readonly id: string
}

/** A scope that has no cap is held without a limit: the largest amount Credits can be. */
export const UNLIMITED = Number.MAX_SAFE_INTEGER

/** The ledger account that keeps a scope's money. */
export const accountOf = (s: Scope): string => `${s.kind}:${s.id}`

/** The ledger reservation that holds one call's money in one scope. */
export const holdOf = (call: string, kind: ScopeKind): string => `${call}@${kind}`

export const endUserScopeId = (project: string, user: string): string => `${project}/${user}`

/** The scopes a call is held in, in SCOPE_ORDER. */
export const scopesOf = (call: { readonly project: string; readonly key: string; readonly endUser?: string | undefined }): ReadonlyArray<Scope> => [
  { kind: "project", id: call.project },
  { kind: "key", id: call.key },
  ...(call.endUser === undefined ? [] : [{ kind: "end_user" as const, id: endUserScopeId(call.project, call.endUser) }])
]

// ---------------------------------------------------------------------------------------------
// State

export interface ScopesState {
  readonly ledger: Ledger.LedgerState
  /** A project's budget (absent: 0, as the ledger has it: an unknown project spends nothing). */
  readonly projectCaps: ReadonlyMap<string, number>
  /** A key's budget; absent or null: none. */
  readonly keyCaps: ReadonlyMap<string, number | null>
  /** A project's default budget for each of its end users; absent or null: none. */
  readonly endUserDefaults: ReadonlyMap<string, number | null>
  /** An end user's own budget, by `endUserScopeId`; it overrides the project's default (null: no budget at all). */
  readonly endUserCaps: ReadonlyMap<string, number | null>
  /** Each call admitted, with the scopes it holds in. */
  readonly calls: ReadonlyMap<string, { readonly project: string; readonly scopes: ReadonlyArray<Scope> }>
}

export const empty: ScopesState = {
  ledger: Ledger.empty,
  projectCaps: new Map(),
  keyCaps: new Map(),
  endUserDefaults: new Map(),
  endUserCaps: new Map(),
  calls: new Map()
}

/** The cap a scope has now. */
export const capOf = (state: ScopesState, scope: Scope): number => {
  switch (scope.kind) {
    case "project":
      return state.projectCaps.get(scope.id) ?? 0
    case "key":
      return state.keyCaps.get(scope.id) ?? UNLIMITED
    case "end_user": {
      if (state.endUserCaps.has(scope.id)) return state.endUserCaps.get(scope.id) ?? UNLIMITED
      const project = scope.id.slice(0, scope.id.indexOf("/"))
      return state.endUserDefaults.get(project) ?? UNLIMITED
    }
  }
}

/** A scope's account in a window (opened with its cap now if nothing touched it yet). */
export const accountIn = (state: ScopesState, scope: Scope, window: string): Ledger.Account => {
  const a = Ledger.accountOf(state.ledger, accountOf(scope), window)
  return state.ledger.accounts.has(Ledger.accountKey(accountOf(scope), window)) ? a : { ...a, cap: capOf(state, scope) }
}

// ---------------------------------------------------------------------------------------------
// Commands

export type Command =
  | { readonly _tag: "SetProjectCap"; readonly project: string; readonly cap: number; readonly window: string }
  | { readonly _tag: "SetKeyCap"; readonly key: string; readonly cap: number | null; readonly window: string }
  | { readonly _tag: "SetEndUserDefault"; readonly project: string; readonly cap: number | null; readonly window: string }
  /** `cap: undefined` removes the override (the project's default applies again). */
  | { readonly _tag: "SetEndUserCap"; readonly project: string; readonly user: string; readonly cap: number | null | undefined; readonly window: string }
  | {
      readonly _tag: "Reserve"
      readonly id: string
      readonly project: string
      readonly key: string
      readonly endUser?: string | undefined
      readonly window: string
      readonly amount: number
    }
  | { readonly _tag: "Settle"; readonly id: string; readonly charge: number }
  | { readonly _tag: "Void"; readonly id: string }

export type Outcome =
  | { readonly _tag: "CapSet" }
  | { readonly _tag: "Reserved"; readonly id: string; readonly amount: number; readonly scopes: ReadonlyArray<ScopeKind> }
  | {
      readonly _tag: "BudgetExceeded"
      /** The first scope without room: a 402's `param`. */
      readonly scope: ScopeKind
      readonly amount: number
      readonly cap: number
      readonly spent: number
      readonly reserved: number
      readonly remaining: number
    }
  | { readonly _tag: "Settled"; readonly id: string; readonly charge: number; readonly released: number }
  | { readonly _tag: "Voided"; readonly id: string; readonly released: number }
  | { readonly _tag: "DuplicateReservation"; readonly id: string }
  | { readonly _tag: "UnknownReservation"; readonly id: string }
  | { readonly _tag: "AlreadyResolved"; readonly id: string; readonly state: "settled" | "voided" }
  | { readonly _tag: "ChargeExceedsReservation"; readonly id: string; readonly charge: number; readonly amount: number }
  | { readonly _tag: "InvalidAmount"; readonly amount: number }

export interface Step {
  readonly state: ScopesState
  readonly outcome: Outcome
}

const isCap = (cap: number | null | undefined): boolean => cap === null || cap === undefined || (Number.isSafeInteger(cap) && cap >= 0)

/** Apply a scope's cap now to its windows from `window` on, through the ledger's own rule (grandfathering included). */
const applyCap = (state: ScopesState, scope: Scope, window: string): ScopesState => ({
  ...state,
  ledger: Ledger.setCap(state.ledger, accountOf(scope), capOf(state, scope), window).state
})

/** The end-user scopes of a project already opened in the ledger (a default applies to each without an override). */
const endUsersOf = (state: ScopesState, project: string): ReadonlyArray<Scope> => {
  const prefix = `end_user:${project}/`
  const ids = new Set<string>()
  for (const a of state.ledger.accounts.values()) if (a.project.startsWith(prefix)) ids.add(a.project.slice("end_user:".length))
  return [...ids].filter((id) => !state.endUserCaps.has(id)).map((id) => ({ kind: "end_user" as const, id }))
}

const setCap = (state: ScopesState, command: Exclude<Command, { _tag: "Reserve" | "Settle" | "Void" }>): Step => {
  if (!isCap(command.cap)) return { state, outcome: { _tag: "InvalidAmount", amount: command.cap as number } }
  switch (command._tag) {
    case "SetProjectCap": {
      const next = { ...state, projectCaps: new Map(state.projectCaps).set(command.project, command.cap) }
      return { state: applyCap(next, { kind: "project", id: command.project }, command.window), outcome: { _tag: "CapSet" } }
    }
    case "SetKeyCap": {
      const next = { ...state, keyCaps: new Map(state.keyCaps).set(command.key, command.cap) }
      return { state: applyCap(next, { kind: "key", id: command.key }, command.window), outcome: { _tag: "CapSet" } }
    }
    case "SetEndUserDefault": {
      const next: ScopesState = { ...state, endUserDefaults: new Map(state.endUserDefaults).set(command.project, command.cap) }
      return { state: endUsersOf(next, command.project).reduce((s, scope) => applyCap(s, scope, command.window), next), outcome: { _tag: "CapSet" } }
    }
    case "SetEndUserCap": {
      const id = endUserScopeId(command.project, command.user)
      const caps = new Map(state.endUserCaps)
      if (command.cap === undefined) caps.delete(id)
      else caps.set(id, command.cap)
      return { state: applyCap({ ...state, endUserCaps: caps }, { kind: "end_user", id }, command.window), outcome: { _tag: "CapSet" } }
    }
  }
}

/** Hold `amount` in every scope of the call, if and only if each has room for it; else nothing changes. */
export const reserve = (state: ScopesState, command: Extract<Command, { _tag: "Reserve" }>): Step => {
  if (state.calls.has(command.id)) return { state, outcome: { _tag: "DuplicateReservation", id: command.id } }
  const scopes = scopesOf(command)
  let ledger = state.ledger
  for (const scope of scopes) {
    // A window opens with the scope's cap of the moment (the ledger's own default is 0).
    if (!ledger.accounts.has(Ledger.accountKey(accountOf(scope), command.window))) {
      ledger = Ledger.setCap(ledger, accountOf(scope), capOf(state, scope), command.window).state
    }
    const r = Ledger.reserve(ledger, holdOf(command.id, scope.kind), accountOf(scope), command.window, command.amount)
    switch (r.outcome._tag) {
      case "Reserved":
        ledger = r.state
        break
      case "BudgetExceeded": {
        const { _tag, ...figures } = r.outcome
        return { state, outcome: { _tag, scope: scope.kind, ...figures } }
      }
      case "InvalidAmount":
        return { state, outcome: r.outcome }
      default:
        // A hold id is the call's id and its scope: it is new whenever the call is.
        throw new Error(`unreachable: ${r.outcome._tag}`)
    }
  }
  return {
    state: { ...state, ledger, calls: new Map(state.calls).set(command.id, { project: command.project, scopes }) },
    outcome: { _tag: "Reserved", id: command.id, amount: command.amount, scopes: scopes.map((s) => s.kind) }
  }
}

/** Resolve a call in every scope it holds, the same way; the first scope's answer is the call's. */
const resolve = (state: ScopesState, id: string, each: (ledger: Ledger.LedgerState, hold: string) => Ledger.Step): Step => {
  const call = state.calls.get(id)
  if (call === undefined) return { state, outcome: { _tag: "UnknownReservation", id } }
  let ledger = state.ledger
  let first: Ledger.Outcome | undefined
  for (const scope of call.scopes) {
    const r = each(ledger, holdOf(id, scope.kind))
    first ??= r.outcome
    // The holds of one call move together: a refusal in the first scope is a refusal in all.
    if (r.outcome._tag !== "Settled" && r.outcome._tag !== "Voided") return { state, outcome: { ...r.outcome, id } as Outcome }
    ledger = r.state
  }
  return { state: { ...state, ledger }, outcome: { ...(first as Outcome), id } as Outcome }
}

export const settle = (state: ScopesState, id: string, charge: number): Step => resolve(state, id, (l, hold) => Ledger.settle(l, hold, charge))

export const voidCall = (state: ScopesState, id: string): Step => resolve(state, id, (l, hold) => Ledger.voidReservation(l, hold))

export const step = (state: ScopesState, command: Command): Step => {
  switch (command._tag) {
    case "Reserve":
      return reserve(state, command)
    case "Settle":
      return settle(state, command.id, command.charge)
    case "Void":
      return voidCall(state, command.id)
    default:
      return setCap(state, command)
  }
}

export const run = Ledger.runner(step)

// ---------------------------------------------------------------------------------------------
// Invariants

export type InvariantName =
  | Ledger.InvariantName
  /** A call holds in exactly the scopes it names, each with the same amount, state and charge. */
  | "all-or-none"

export interface Violation {
  readonly invariant: InvariantName
  readonly subject: string
}

/** Every violated invariant: the ledger's in every scope's account, and all-or-none across a call's scopes. */
export const violations = (state: ScopesState): ReadonlyArray<Violation> => {
  const out: Array<Violation> = [...Ledger.violations(state.ledger)]
  const holdsOfCall = new Map<string, Array<Ledger.Reservation>>()
  for (const r of state.ledger.reservations.values()) {
    const call = r.id.slice(0, r.id.lastIndexOf("@"))
    holdsOfCall.set(call, [...(holdsOfCall.get(call) ?? []), r])
  }
  for (const [id, call] of state.calls) {
    const holds = holdsOfCall.get(id) ?? []
    const expected = call.scopes.map((s) => holdOf(id, s.kind)).sort()
    const same = holds.every((h) => h.amount === holds[0]!.amount && h.state === holds[0]!.state && h.charge === holds[0]!.charge)
    const inTheirAccounts = call.scopes.every((s) => state.ledger.reservations.get(holdOf(id, s.kind))?.project === accountOf(s))
    if (JSON.stringify(holds.map((h) => h.id).sort()) !== JSON.stringify(expected) || !same || !inTheirAccounts) {
      out.push({ invariant: "all-or-none", subject: id })
    }
    holdsOfCall.delete(id)
  }
  for (const call of holdsOfCall.keys()) out.push({ invariant: "all-or-none", subject: call })
  return out
}
