/** Small shared pieces: formatting, the budget bar, a modal dialog, status badges, errors. */
import type { ComponentChildren } from "preact"
import { useEffect, useRef } from "preact/hooks"
import type { Window } from "./api.ts"

export const credits = (n: number) => n.toLocaleString("en-US")

export const when = (iso: string | null) => (iso === null ? "—" : new Date(iso).toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "medium", timeZone: "UTC" }) + " UTC")

export const ago = (iso: string | null) => {
  if (iso === null) return "never"
  const s = Math.round((Date.now() - Date.parse(iso)) / 1000)
  if (s < 60) return `${Math.max(s, 0)} s ago`
  if (s < 3600) return `${Math.round(s / 60)} min ago`
  if (s < 86_400) return `${Math.round(s / 3600)} h ago`
  return `${Math.round(s / 86_400)} d ago`
}

/** spent / reserved / remaining of the window, as a bar with the figures written out (the bar is decoration). */
export const BudgetBar = ({ window, label }: { window: Window; label: string }) => {
  const cap = Math.max(window.budget_credits, 1)
  const pct = (n: number) => Math.min(100, (n / cap) * 100)
  const spentPct = pct(window.spent)
  const reservedPct = Math.min(100 - spentPct, pct(window.reserved))
  return (
    <div class="budget">
      <div class="bar" role="img" aria-label={`${label}: ${credits(window.spent)} of ${credits(window.budget_credits)} Credits spent, ${credits(window.reserved)} reserved, ${credits(window.remaining)} remaining`}>
        <span class="bar-spent" data-pct={spentPct.toFixed(1)} ref={(el) => el?.style.setProperty("width", `${spentPct}%`)} />
        <span class="bar-reserved" ref={(el) => el?.style.setProperty("width", `${reservedPct}%`)} />
      </div>
      <dl class="figures">
        <div><dt>Spent</dt><dd data-field="spent">{credits(window.spent)}</dd></div>
        <div><dt>Reserved</dt><dd data-field="reserved">{credits(window.reserved)}</dd></div>
        <div><dt>Remaining</dt><dd data-field="remaining">{credits(window.remaining)}</dd></div>
        <div><dt>Cap ({window.period})</dt><dd data-field="cap">{credits(window.budget_credits)}</dd></div>
      </dl>
    </div>
  )
}

/** A modal <dialog>: focus moves into it, Escape closes it, the page behind is inert. */
export const Dialog = ({ title, open, onClose, children }: { title: string; open: boolean; onClose: () => void; children: ComponentChildren }) => {
  const ref = useRef<HTMLDialogElement>(null)
  useEffect(() => {
    const d = ref.current
    if (d === null) return
    if (open && !d.open) d.showModal()
    if (!open && d.open) d.close()
  }, [open])
  return (
    <dialog ref={ref} aria-labelledby="dialog-title" onClose={onClose} onCancel={onClose}>
      <h2 id="dialog-title">{title}</h2>
      {open ? children : null}
    </dialog>
  )
}

export const Status = ({ value }: { value: string }) => <span class={`badge badge-${value}`}>{value}</span>

export const ErrorNote = ({ error }: { error: string | null }) => (error === null ? null : <p class="error" role="alert">{error}</p>)

export const message = (e: unknown) => (e instanceof Error ? e.message : String(e))
