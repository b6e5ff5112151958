/**
 * The window checks of the audit: per budget window (project, period), the stored spent and reserved
 * against the receipts and held reservations walked, by the rulebook's own rule (spec/ledger.ts
 * `checkWindow`), reported as the audit's findings.
 */
import { accountKey, checkWindow } from "../ledger.ts"
import type { Report } from "./findings.ts"
import { windowSubject } from "./receipts.ts"
import type { WindowRow } from "./rows.ts"

interface WindowState {
  readonly project: string
  readonly period: string
  stored: WindowRow | undefined
  receiptSum: number
  heldSum: number
  receipts: number
}

export const makeWindowChecks = (report: Report) => {
  const windowStates = new Map<string, WindowState>()

  const windowOf = (project: string, period: string): WindowState => {
    const k = accountKey(project, period)
    let w = windowStates.get(k)
    if (w === undefined) {
      w = { project, period, stored: undefined, receiptSum: 0, heldSum: 0, receipts: 0 }
      windowStates.set(k, w)
    }
    return w
  }

  const windows = (rows: Iterable<WindowRow>) => {
    for (const row of rows) windowOf(row.project_id, row.period).stored = row
  }

  /** Checks every window in scope; answers how many were checked. */
  const finish = (
    inScope: (project: string, period: string) => boolean,
    capOf: (project: string) => { readonly cap: number; readonly changedAt: number | undefined } | undefined
  ): number => {
    let checked = 0
    for (const w of windowStates.values()) {
      if (!inScope(w.project, w.period)) continue
      checked++
      const spent = w.stored?.spent ?? 0
      const reserved = w.stored?.reserved ?? 0
      const subject = windowSubject(w.project, w.period)
      // The window rules are the rulebook's (spec/ledger.ts `checkWindow`), on this window's rows.
      const project = capOf(w.project)
      const cap = project?.cap ?? 0
      const findings = checkWindow({
        cap,
        spent,
        reserved,
        receiptSum: w.receiptSum,
        heldSum: w.heldSum,
        capChangedAt: project?.changedAt,
        lastHoldAt: w.stored?.last_hold_at ?? undefined
      })
      for (const f of findings) {
        if (f.invariant === "spent-equals-receipts" || f.invariant === "non-negative") {
          report("window_spent_mismatch", subject, w.project, `window ${subject} records ${spent} Credits spent; its ${w.receipts} receipt(s) charge ${w.receiptSum}`, {
            spent,
            receipts_sum: w.receiptSum
          })
        } else if (f.invariant === "reserved-equals-held") {
          report("window_reserved_mismatch", subject, w.project, `window ${subject} records ${reserved} Credits reserved; its held reservations total ${w.heldSum}`, {
            reserved,
            held_sum: w.heldSum
          })
        } else {
          const committed = Math.max(spent + reserved, w.receiptSum + w.heldSum)
          report("window_over_cap", subject, w.project, `window ${subject} commits ${committed} Credits (spent + reserved) over its cap of ${cap}`, {
            cap,
            spent,
            reserved,
            receipts_sum: w.receiptSum,
            held_sum: w.heldSum
          })
        }
      }
    }
    return checked
  }

  return { windowOf, windows, finish } as const
}
