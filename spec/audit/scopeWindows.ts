/**
 * The audit's checks of the key and end-user scopes' windows (issue 41; spec/scopes.ts): each scope
 * is an account of the ledger and keeps its rules, so each of its windows is checked by the rulebook's
 * own rule (spec/ledger.ts `checkWindow`) as a project's is — spent equals what the receipts of the
 * calls held in it charged, reserved equals its holds still held, and spent + reserved within its cap
 * (a cap lowered below what the window had committed is grandfathered, as for a project).
 *
 * The store hands three kinds of rows: each stored window (`scope_windows`), each window's sums over
 * the holds made in it (the receipts of its settled holds, its held amounts, its latest hold), and the
 * caps (a key's; an end user's override, else its project's default). A window with holds but no
 * stored row, or a stored row with no holds, is checked too (its missing side reads as zeros).
 */
import { checkWindow } from "../ledger.ts"
import { UNLIMITED } from "../scopes.ts"
import type { Report } from "./findings.ts"

/** A scope's stored window. */
export interface ScopeWindowRow {
  /** `key:<key id>` or `end_user:<project>/<user>` (spec/scopes.ts `accountOf`). */
  readonly scope: string
  readonly period: string
  readonly spent: number
  readonly reserved: number
}

/** A scope window's sums over the holds made in it. */
export interface ScopeHoldsRow {
  readonly scope: string
  readonly period: string
  /** The project the holds belong to. */
  readonly project_id: string
  /** Σ credits_charged of the receipts of its settled holds. */
  readonly receipt_sum: number
  /** Σ amount of its holds still held. */
  readonly held_sum: number
  readonly receipts: number
  readonly last_hold_at: number | null
}

/** A scope's cap now (null: none) and when it last changed (null: unknown). */
export interface ScopeCapRow {
  readonly scope: string
  readonly project_id: string
  readonly cap: number | null
  readonly cap_changed_at: number | null
}

/** An end user's cap when it has no row of its own: its project's default. */
export interface EndUserDefaultRow {
  readonly project_id: string
  readonly cap: number | null
  readonly cap_changed_at: number | null
}

interface State {
  stored: ScopeWindowRow | undefined
  holds: ScopeHoldsRow | undefined
}

/** The project a scope's name belongs to, when the name says it (an end user's); a key's comes from its cap row. */
const projectOfName = (scope: string): string | undefined => {
  if (!scope.startsWith("end_user:")) return undefined
  const slash = scope.indexOf("/")
  return slash === -1 ? undefined : scope.slice("end_user:".length, slash)
}

export const makeScopeWindowChecks = (report: Report) => {
  const states = new Map<string, State>()
  const caps = new Map<string, ScopeCapRow>()
  const defaults = new Map<string, EndUserDefaultRow>()

  const stateOf = (scope: string, period: string): State => {
    const k = `${scope}\u0000${period}`
    let s = states.get(k)
    if (s === undefined) states.set(k, (s = { stored: undefined, holds: undefined }))
    return s
  }

  const scopeWindows = (rows: Iterable<ScopeWindowRow>) => {
    for (const r of rows) stateOf(r.scope, r.period).stored = r
  }
  const scopeHolds = (rows: Iterable<ScopeHoldsRow>) => {
    for (const r of rows) stateOf(r.scope, r.period).holds = r
  }
  const scopeCaps = (rows: Iterable<ScopeCapRow>, endUserDefaults: Iterable<EndUserDefaultRow>) => {
    for (const r of rows) caps.set(r.scope, r)
    for (const d of endUserDefaults) defaults.set(d.project_id, d)
  }

  /** The scope's cap now: its own row, else (an end user) its project's default, else none. */
  const capOf = (scope: string): { readonly cap: number; readonly changedAt: number | undefined; readonly project: string | undefined } => {
    const own = caps.get(scope)
    if (own !== undefined) return { cap: own.cap === null ? UNLIMITED : Number(own.cap), changedAt: own.cap_changed_at === null ? undefined : Number(own.cap_changed_at), project: own.project_id }
    const project = projectOfName(scope)
    const d = project === undefined ? undefined : defaults.get(project)
    return { cap: d?.cap === null || d?.cap === undefined ? UNLIMITED : Number(d.cap), changedAt: d?.cap_changed_at === null || d?.cap_changed_at === undefined ? undefined : Number(d.cap_changed_at), project }
  }

  /** Checks every scope window in scope (`inScope` by project and period); answers how many. */
  const finish = (inScope: (project: string, period: string) => boolean): number => {
    let checked = 0
    for (const [k, s] of states) {
      const [scope, period] = k.split("\u0000") as [string, string]
      const cap = capOf(scope)
      const project = s.holds?.project_id ?? cap.project ?? ""
      if (!inScope(project, period)) continue
      checked++
      const spent = Number(s.stored?.spent ?? 0)
      const reserved = Number(s.stored?.reserved ?? 0)
      const receiptSum = Number(s.holds?.receipt_sum ?? 0)
      const heldSum = Number(s.holds?.held_sum ?? 0)
      const subject = `${scope}/${period}`
      const findings = checkWindow({
        cap: cap.cap,
        spent,
        reserved,
        receiptSum,
        heldSum,
        capChangedAt: cap.changedAt,
        lastHoldAt: s.holds?.last_hold_at === null || s.holds?.last_hold_at === undefined ? undefined : Number(s.holds.last_hold_at)
      })
      for (const f of findings) {
        if (f.invariant === "spent-equals-receipts" || f.invariant === "non-negative") {
          report("window_spent_mismatch", subject, project, `scope window ${subject} records ${spent} Credits spent; the receipts of its ${Number(s.holds?.receipts ?? 0)} settled hold(s) charge ${receiptSum}`, {
            spent,
            receipts_sum: receiptSum
          })
        } else if (f.invariant === "reserved-equals-held") {
          report("window_reserved_mismatch", subject, project, `scope window ${subject} records ${reserved} Credits reserved; its held reservations total ${heldSum}`, {
            reserved,
            held_sum: heldSum
          })
        } else {
          report("window_over_cap", subject, project, `scope window ${subject} commits ${Math.max(spent + reserved, receiptSum + heldSum)} Credits (spent + reserved) over its cap of ${cap.cap}`, {
            cap: cap.cap,
            spent,
            reserved,
            receipts_sum: receiptSum,
            held_sum: heldSum
          })
        }
      }
    }
    return checked
  }

  return { scopeWindows, scopeHolds, scopeCaps, finish } as const
}
