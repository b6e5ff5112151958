/**
 * Budgets below the project (issue 41, operator only): a key's and an end user's budget in the
 * project's current window, and the end users who spent most in it. Read from
 * GET /admin/v1/projects/{id}/key_budgets, …/end_user_budget and …/end_users?order=spent.
 */
import { useEffect, useState } from "preact/hooks"
import { api, type EndUser, type EndUserDefault, type KeyBudget, type Project } from "./api.ts"
import { Bar, credits, ErrorNote, message } from "./ui.tsx"

/** How many end users the ranking shows. */
export const TOP_END_USERS = 10

/** A key's or an end user's window in a table cell: a small bar and its figures, or "no budget". */
export const ScopeBudget = ({ window, label }: { window: KeyBudget | EndUser; label: string }) => {
  const { budget_credits: cap, remaining } = window
  if (cap === null || remaining === null) return <span class="meta" data-budget="none">no budget</span>
  return (
    <div class="scope-budget">
      <Bar window={{ budget_credits: cap, spent: window.spent, reserved: window.reserved, remaining }} label={label} />
      <span class="figures-inline">
        <span data-budget="spent">{credits(window.spent)}</span> spent · <span data-budget="reserved">{credits(window.reserved)}</span> reserved ·{" "}
        <span data-budget="remaining">{credits(remaining)}</span> left of <span data-budget="cap">{credits(cap)}</span>
      </span>
    </div>
  )
}

/** The project's keys that have a budget, by id; reread whenever the project is (after a call shows, a key is acted on). */
export const useKeyBudgets = (project: Project, enabled: boolean) => {
  const [budgets, setBudgets] = useState<ReadonlyMap<string, KeyBudget> | null>(null)
  const [error, setError] = useState<string | null>(null)
  useEffect(() => {
    if (!enabled) return
    api.keyBudgets(project.id).then((all) => { setBudgets(new Map(all.map((b) => [b.key_id, b]))); setError(null) }, (e) => setError(message(e)))
  }, [project, enabled])
  return { budgets, error }
}

const capOf = (u: EndUser) =>
  u.budget_credits === null ? "none" : `${credits(u.budget_credits)} (${u.budget_source === "override" ? "own" : "project default"})`

/** The project's default budget for its end users, and the ten that spent most in its current window. */
export const EndUsersSection = ({ project }: { project: Project }) => {
  const [fallback, setFallback] = useState<EndUserDefault | null>(null)
  const [top, setTop] = useState<ReadonlyArray<EndUser> | null>(null)
  const [more, setMore] = useState(false)
  const [error, setError] = useState<string | null>(null)
  useEffect(() => {
    Promise.all([api.endUserDefault(project.id), api.topEndUsers(project.id, TOP_END_USERS)]).then(
      ([d, page]) => { setFallback(d); setTop(page.data); setMore(page.has_more); setError(null) },
      (e) => setError(message(e))
    )
  }, [project])
  const period = project.current_window.period
  return (
    <section class="card" aria-labelledby="end-users-h">
      <h2 id="end-users-h">Top end users by spend</h2>
      <ErrorNote error={error} />
      {fallback === null ? null : (
        <p class="meta" data-field="end-user-default">
          Default budget for each end user: {fallback.end_user_budget_credits === null ? "none" : <><strong>{credits(fallback.end_user_budget_credits)}</strong> Credits a {project.budget_period}</>}
          {" "}(an end user's own budget overrides it).
        </p>
      )}
      {top === null ? (error === null ? <p role="status">Loading…</p> : null) : top.length === 0 ? (
        <p class="meta" data-end-users="none">No end user has spent in {period} yet: calls name one with <code>user</code> (or <code>metadata.end_user</code>).</p>
      ) : (
        <div class="table-wrap">
          <table data-table="end-users">
            <caption class="sr-only">The {top.length} end users that spent most in {period}</caption>
            <thead><tr><th scope="col" class="num">#</th><th scope="col">End user</th><th scope="col" class="num">Spent ({period})</th><th scope="col">Cap</th><th scope="col">Budget</th></tr></thead>
            <tbody>
              {top.map((u, i) => (
                <tr data-end-user={u.user}>
                  <td class="num">{i + 1}</td>
                  <td><code>{u.user}</code></td>
                  <td class="num" data-field="end-user-spent">{credits(u.spent)}</td>
                  <td data-field="end-user-cap">{capOf(u)}</td>
                  <td><ScopeBudget window={u} label={`End user ${u.user}'s budget`} /></td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {more ? <p class="meta">Only the top {TOP_END_USERS} are shown; the whole ranking: <code>GET /admin/v1/projects/{project.id}/end_users?order=spent</code>.</p> : null}
    </section>
  )
}
