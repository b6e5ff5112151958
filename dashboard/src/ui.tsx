/** Small shared pieces: formatting, the budget bar, a modal dialog, status badges, errors. */
import type { ComponentChildren } from "preact"
import { useEffect, useRef, useState } from "preact/hooks"
import type { Page, Window } from "./api.ts"

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

/** A window with a cap: the project's, or a key's or an end user's that has one. */
export type CappedWindow = Pick<Window, "budget_credits" | "spent" | "reserved" | "remaining">

/** The bar itself: spent, then reserved, as shares of the cap (decoration: its label and the figures say the same). */
export const Bar = ({ window, label }: { window: CappedWindow; label: string }) => {
  const cap = Math.max(window.budget_credits, 1)
  const pct = (n: number) => Math.min(100, (n / cap) * 100)
  const spentPct = pct(window.spent)
  const reservedPct = Math.min(100 - spentPct, pct(window.reserved))
  return (
    <div class="bar" role="img" aria-label={`${label}: ${credits(window.spent)} of ${credits(window.budget_credits)} Credits spent, ${credits(window.reserved)} reserved, ${credits(window.remaining)} remaining`}>
      <span class="bar-spent" data-pct={spentPct.toFixed(1)} ref={(el) => el?.style.setProperty("width", `${spentPct}%`)} />
      <span class="bar-reserved" ref={(el) => el?.style.setProperty("width", `${reservedPct}%`)} />
    </div>
  )
}

/** spent / reserved / remaining of the window, as a bar with the figures written out. */
export const BudgetBar = ({ window, label }: { window: Window; label: string }) => (
  <div class="budget">
    <Bar window={window} label={label} />
    <dl class="figures">
      <div><dt>Spent</dt><dd data-field="spent">{credits(window.spent)}</dd></div>
      <div><dt>Reserved</dt><dd data-field="reserved">{credits(window.reserved)}</dd></div>
      <div><dt>Remaining</dt><dd data-field="remaining">{credits(window.remaining)}</dd></div>
      <div><dt>Cap ({window.period})</dt><dd data-field="cap">{credits(window.budget_credits)}</dd></div>
    </dl>
  </div>
)

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

/**
 * An admin list shown as one growing table: its first page, then `more` appends the next (next_cursor).
 * When the first page changes (a reload after a write), the pages that were open are read again, so a
 * key rotated on the third page, and its replacement, stay in view.
 */
export const usePages = <T,>(first: Page<T> | null, next: (cursor: string) => Promise<Page<T>>) => {
  const [shown, setShown] = useState<{ readonly items: ReadonlyArray<T>; readonly last: Page<T>; readonly pages: number } | null>(null)
  const [loading, setLoading] = useState(false)
  const [error, setError] = useState<string | null>(null)
  const follow = async (items: ReadonlyArray<T>, last: Page<T>, pages: number, upTo: number) => {
    let all = items
    let page = last
    for (let n = pages; n < upTo && page.next_cursor !== null; n++) {
      page = await next(page.next_cursor)
      all = [...all, ...page.data]
    }
    return { items: all, last: page, pages: Math.max(pages, upTo) }
  }
  const run = (work: () => Promise<void>) => {
    setLoading(true)
    setError(null)
    work().catch((e) => setError(message(e))).finally(() => setLoading(false))
  }
  useEffect(() => {
    if (first !== null) run(async () => setShown(await follow(first.data, first, 1, shown?.pages ?? 1)))
  }, [first])
  const more = () => {
    if (shown !== null) run(async () => setShown(await follow(shown.items, shown.last, shown.pages, shown.pages + 1)))
  }
  return { items: shown?.items ?? null, hasMore: shown?.last.has_more === true, more, loading, error }
}

/** The "more" button under a paged list, while more follow. */
export const More = ({ list, label }: { list: { readonly hasMore: boolean; readonly more: () => void; readonly loading: boolean }; label: string }) =>
  list.hasMore ? <p class="more"><button type="button" class="secondary" onClick={list.more} disabled={list.loading}>{list.loading ? "Loading…" : label}</button></p> : null
