import { useEffect, useMemo, useState } from "preact/hooks"
import { api, type ApiKey, ENVIRONMENTS, type Environment, type IssuedKey, type KeyBudget, type Page, type Project, type RotatedKey, type Session, type Statement, type Usage } from "./api.ts"
import { EndUsersSection, ScopeBudget, useKeyBudgets } from "./budgets.tsx"
import { UsageChart } from "./chart.tsx"
import { describeFinding, type ExportVerdict, verifyExport } from "./verify.ts"
import { ago, BudgetBar, credits, Dialog, ErrorNote, message, More, Status, usePages, when } from "./ui.tsx"

/** The budget card's heading for the project's budget period (its window: this month, this week, today, or all time). */
const BUDGET_HEADING: Record<string, string> = { month: "Budget this month", week: "Budget this week", day: "Budget today", total: "Budget (all time)" }

const thisMonth = () => new Date().toISOString().slice(0, 7)

export const ProjectPage = ({ id, session }: { id: string; session: Session }) => {
  const [project, setProject] = useState<Project | null>(null)
  const [error, setError] = useState<string | null>(null)
  const operator = session.role === "operator"
  const load = () => api.project(id).then(setProject, (e) => setError(message(e)))
  useEffect(() => void load(), [id])

  if (error !== null && project === null) return <><h1>Project</h1><ErrorNote error={error} /></>
  if (project === null) return <p role="status">Loading…</p>
  return (
    <>
      <h1>{project.name}</h1>
      <p class="meta"><code>{project.id}</code> · {project.organization}{session.role === "team" ? ` · ${session.environment} (read-only)` : ""}</p>
      <nav class="tabs" aria-label="Project"><a href={`#/projects/${id}`} aria-current="page">Overview</a><a href={`#/projects/${id}/requests`}>Requests and receipts</a></nav>
      <ErrorNote error={error} />
      <section class="card" aria-labelledby="budget-h">
        <h2 id="budget-h">{BUDGET_HEADING[project.budget_period] ?? `Budget (${project.budget_period})`}</h2>
        <BudgetBar window={project.current_window} label="Budget" />
        {operator ? <EditLimits project={project} onSaved={setProject} /> : <p class="meta">Rate limit: {project.rate_limit.requests_per_minute} requests/min, burst {project.rate_limit.burst}</p>}
      </section>
      <UsageSection project={project} session={session} />
      <KeysSection project={project} session={session} reload={load} />
      {operator ? <EndUsersSection project={project} /> : null}
      <VerifySection project={project} />
    </>
  )
}

const EditLimits = ({ project, onSaved }: { project: Project; onSaved: (p: Project) => void }) => {
  const [budget, setBudget] = useState(String(project.budget_credits))
  const [rpm, setRpm] = useState(String(project.rate_limit.requests_per_minute))
  const [burst, setBurst] = useState(String(project.rate_limit.burst))
  const [state, setState] = useState<string | null>(null)
  const [error, setError] = useState<string | null>(null)
  const save = async (e: Event) => {
    e.preventDefault()
    setError(null)
    try {
      const p = await api.updateProject(project.id, { budget_credits: Number(budget), rate_limit: { requests_per_minute: Number(rpm), burst: Number(burst) } })
      onSaved(p)
      setState("Saved. The next call sees the new limits.")
    } catch (err) {
      setError(message(err))
    }
  }
  return (
    <form onSubmit={save} class="grid-form inline" aria-label="Budget and rate limit">
      <label for="e-budget">Budget cap (Credits)</label>
      <input id="e-budget" type="number" min="0" step="1" required value={budget} onInput={(e) => setBudget(e.currentTarget.value)} />
      <label for="e-rpm">Requests per minute</label>
      <input id="e-rpm" type="number" min="1" step="1" required value={rpm} onInput={(e) => setRpm(e.currentTarget.value)} />
      <label for="e-burst">Burst</label>
      <input id="e-burst" type="number" min="1" step="1" required value={burst} onInput={(e) => setBurst(e.currentTarget.value)} />
      <button type="submit">Save limits</button>
      {state === null ? null : <p role="status" class="ok">{state}</p>}
      <ErrorNote error={error} />
    </form>
  )
}

const UsageSection = ({ project, session }: { project: Project; session: Session }) => {
  const [period, setPeriod] = useState(thisMonth())
  const [environment, setEnvironment] = useState("")
  const [usage, setUsage] = useState<Usage | null>(null)
  const [error, setError] = useState<string | null>(null)
  useEffect(() => {
    if (!/^\d{4}-\d{2}$/.test(period)) return
    api.usage(project.id, period, environment).then((u) => { setUsage(u); setError(null) }, (e) => setError(message(e)))
  }, [project.id, period, environment, project.current_window.spent])
  const allEnvironments = usage !== null && usage.environment === null
  const matches = usage !== null && usage.receipts_credits === usage.budget.spent
  return (
    <section class="card" aria-labelledby="usage-h">
      <h2 id="usage-h">Usage</h2>
      <div class="filters">
        <label for="u-month">Month</label>
        <input id="u-month" type="month" value={period} onInput={(e) => setPeriod(e.currentTarget.value)} />
        {session.role === "operator" ? (
          <>
            <label for="u-env">Environment</label>
            <select id="u-env" value={environment} onChange={(e) => setEnvironment(e.currentTarget.value)}>
              <option value="">All</option>
              {ENVIRONMENTS.map((env) => <option value={env}>{env}</option>)}
            </select>
          </>
        ) : null}
      </div>
      <ErrorNote error={error} />
      {usage === null ? <p role="status">Loading…</p> : (
        <>
          <p class="total" data-testid="receipts-total">
            {usage.period}: <strong data-field="receipts-credits">{credits(usage.receipts_credits)}</strong> Credits over <strong data-field="receipts">{credits(usage.receipts)}</strong> receipts
            {allEnvironments
              ? matches ? <> — <span class="ok">equal to spent ({credits(usage.budget.spent)}) ✓</span></> : <> — <span class="warn">spent is {credits(usage.budget.spent)}</span></>
              : <> in {usage.environment}; the budget's spent ({credits(usage.budget.spent)}) covers every environment.</>}
          </p>
          <div class="charts">
            <UsageChart usage={usage} field="credits" title="Credits per day" />
            <UsageChart usage={usage} field="requests" title="Requests per day" />
          </div>
        </>
      )}
    </section>
  )
}

const KeysSection = ({ project, session, reload }: { project: Project; session: Session; reload: () => Promise<unknown> }) => {
  const operator = session.role === "operator"
  const [environment, setEnvironment] = useState<Environment>("development")
  const [issued, setIssued] = useState<IssuedKey | RotatedKey | null>(null)
  const [rotating, setRotating] = useState<ApiKey | null>(null)
  const [grace, setGrace] = useState("86400")
  const [revoking, setRevoking] = useState<ApiKey | null>(null)
  const [error, setError] = useState<string | null>(null)
  const act = async (f: () => Promise<void>) => {
    setError(null)
    try {
      await f()
      await reload()
    } catch (err) {
      setError(message(err))
    }
  }
  // The project embeds the first page of its keys; the rest come from its keys list.
  const first = useMemo((): Page<ApiKey> => {
    const keys = project.keys
    return { object: "list", data: keys, has_more: project.keys_has_more, next_cursor: project.keys_has_more ? keys[keys.length - 1]!.id : null }
  }, [project])
  const list = usePages(first, (cursor) => api.keys(project.id, cursor))
  const keys = list.items ?? []
  // A key's own budget is the operator's to see (the budgets API is operator only).
  const keyBudgets = useKeyBudgets(project, operator)
  return (
    <section class="card" aria-labelledby="keys-h">
      <h2 id="keys-h">API keys</h2>
      <ErrorNote error={error ?? list.error ?? keyBudgets.error} />
      <div class="table-wrap">
        <table data-table="keys">
          <thead><tr><th scope="col">Key</th><th scope="col">Environment</th><th scope="col">Status</th><th scope="col">Created</th><th scope="col">Expires</th><th scope="col">Last used</th>{operator ? <><th scope="col">Budget ({project.current_window.period})</th><th scope="col"><span class="sr-only">Actions</span></th></> : null}</tr></thead>
          <tbody>
            {keys.map((k) => (
              <tr data-key={k.id}>
                <td><code>{k.id}</code>{k.replaces === null ? null : <div class="meta">replaces <code>{k.replaces}</code></div>}</td>
                <td>{k.environment}</td>
                <td><Status value={k.status} /></td>
                <td>{when(k.created_at)}</td>
                <td>{k.status === "revoked" ? `revoked ${when(k.revoked_at)}` : when(k.expires_at)}</td>
                <td data-field="last-used" title={when(k.last_used_at)}>{ago(k.last_used_at)}</td>
                {operator ? (
                  <td data-key-budget={k.id}>
                    {keyBudgets.budgets === null ? null : <KeyBudgetCell budget={keyBudgets.budgets.get(k.id)} keyId={k.id} />}
                  </td>
                ) : null}
                {operator ? (
                  <td class="actions">
                    {k.status === "active" ? <button type="button" class="secondary" onClick={() => setRotating(k)} aria-label={`Rotate ${k.id}`}>Rotate</button> : null}
                    {k.status === "active" || k.status === "rotated" ? <button type="button" class="danger" onClick={() => setRevoking(k)} aria-label={`Revoke ${k.id}`}>Revoke</button> : null}
                  </td>
                ) : null}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <More list={list} label="More keys" />
      {operator ? (
        <form class="inline-form" onSubmit={(e) => { e.preventDefault(); void act(async () => setIssued(await api.createKey(project.id, environment))) }}>
          <label for="k-env">Environment</label>
          <select id="k-env" value={environment} onChange={(e) => setEnvironment(e.currentTarget.value as Environment)}>
            {ENVIRONMENTS.map((env) => <option value={env}>{env}</option>)}
          </select>
          <button type="submit">Create key</button>
        </form>
      ) : null}

      <Dialog title={issued === null || !("replaces" in issued) ? "New API key" : "Rotated API key"} open={issued !== null} onClose={() => setIssued(null)}>
        {issued === null ? null : <SecretOnce issued={issued} onDone={() => setIssued(null)} />}
      </Dialog>

      <Dialog title={`Rotate ${rotating?.id ?? ""}`} open={rotating !== null} onClose={() => setRotating(null)}>
        <form onSubmit={(e) => {
          e.preventDefault()
          const key = rotating!
          setRotating(null)
          void act(async () => setIssued(await api.rotateKey(key.id, Number(grace))))
        }}>
          <p>A new key works at once. The old key keeps working until the grace period ends, so clients can switch without downtime.</p>
          <label for="r-grace">Grace period (seconds)</label>
          <input id="r-grace" type="number" min="0" max="31536000" step="1" required value={grace} onInput={(e) => setGrace(e.currentTarget.value)} />
          <div class="buttons"><button type="button" class="secondary" onClick={() => setRotating(null)}>Cancel</button><button type="submit">Rotate key</button></div>
        </form>
      </Dialog>

      <Dialog title={`Revoke ${revoking?.id ?? ""}?`} open={revoking !== null} onClose={() => setRevoking(null)}>
        <p>Every call with this key fails with 401 from now on. This cannot be undone.</p>
        <div class="buttons">
          <button type="button" class="secondary" onClick={() => setRevoking(null)}>Cancel</button>
          <button type="button" class="danger" onClick={() => { const key = revoking!; setRevoking(null); void act(async () => void (await api.revokeKey(key.id))) }}>Revoke key</button>
        </div>
      </Dialog>
    </section>
  )
}

const KeyBudgetCell = ({ budget, keyId }: { budget: KeyBudget | undefined; keyId: string }) =>
  budget === undefined ? <span class="meta" data-budget="none">no budget</span> : <ScopeBudget window={budget} label={`Key ${keyId}'s budget`} />

/** Copy with the Clipboard API (secure contexts: HTTPS, localhost), else by selecting the field and the copy command. */
const copy = async (text: string): Promise<boolean> => {
  try {
    await navigator.clipboard.writeText(text)
    return true
  } catch {
    const field = document.getElementById("secret") as HTMLInputElement | null
    field?.select()
    return document.execCommand("copy")
  }
}

/** The secret, shown this once: a copy button and a warning. It is dropped from memory when the dialog closes. */
const SecretOnce = ({ issued, onDone }: { issued: IssuedKey | RotatedKey; onDone: () => void }) => {
  const [copied, setCopied] = useState(false)
  return (
    <div class="secret">
      <p class="warn" role="alert"><strong>Copy this key now.</strong> It is shown only once; Tollgate keeps only its hash and cannot show it again.</p>
      {"replaces" in issued ? <p>It replaces <code>{issued.replaces}</code>, which keeps working until {when(issued.old_key_expires_at)}.</p> : null}
      <label for="secret">{issued.environment} key <code>{issued.id}</code></label>
      <input id="secret" readOnly value={issued.secret} spellcheck={false} onFocus={(e) => e.currentTarget.select()} data-secret />
      <div class="buttons">
        <button type="button" onClick={() => copy(issued.secret).then(setCopied)}>{copied ? "Copied ✓" : "Copy key"}</button>
        <button type="button" class="secondary" onClick={onDone}>I have stored it</button>
      </div>
      <p role="status" class="sr-only">{copied ? "Key copied to the clipboard" : ""}</p>
    </div>
  )
}

/**
 * A month's receipts as a file a customer verifies with `tollgate verify` (docs/verification.md), the
 * same checks run here, in the browser, by the package @tollgate/spec, and — for a closed month — its
 * signed statement as a file, checked against the export when both are here (statement_mismatch names
 * a total that is not the receipts' sum). The open month has no statement yet: the section says so
 * instead of offering one.
 */
const VerifySection = ({ project }: { project: Project }) => {
  const [period, setPeriod] = useState(thisMonth())
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState<string | null>(null)
  const [file, setFile] = useState<{ url: string; name: string; receipts: number; text: string } | null>(null)
  const [statement, setStatement] = useState<{ url: string; name: string; body: Statement } | null>(null)
  const [verdict, setVerdict] = useState<ExportVerdict | null>(null)
  const current = period === thisMonth()
  const open = period >= thisMonth()
  const valid = /^\d{4}-\d{2}$/.test(period)
  const pick = (p: string) => {
    for (const f of [file, statement]) if (f !== null) URL.revokeObjectURL(f.url)
    setFile(null)
    setStatement(null)
    setVerdict(null)
    setError(null)
    setPeriod(p)
  }
  const run = async () => {
    setBusy(true)
    setError(null)
    setVerdict(null)
    try {
      const text = await api.exportReceipts(project.id, period)
      if (file !== null) URL.revokeObjectURL(file.url)
      const v = verifyExport(text, statement === null ? [] : [statement.body])
      setFile({ url: URL.createObjectURL(new Blob([text], { type: "application/jsonl" })), name: `${project.id}-${period}.jsonl`, receipts: v.summary.receipts, text })
      setVerdict(v)
    } catch (e) {
      setError(message(e))
    } finally {
      setBusy(false)
    }
  }
  const fetchStatement = async () => {
    setBusy(true)
    setError(null)
    try {
      const body = await api.statement(project.id, period)
      if (statement !== null) URL.revokeObjectURL(statement.url)
      const json = `${JSON.stringify(body, null, 2)}\n`
      setStatement({ url: URL.createObjectURL(new Blob([json], { type: "application/json" })), name: `statement-${project.id}-${period}.json`, body })
      if (file !== null) setVerdict(verifyExport(file.text, [body]))
    } catch (e) {
      setError(message(e))
    } finally {
      setBusy(false)
    }
  }
  return (
    <section class="card" aria-labelledby="verify-h">
      <h2 id="verify-h">Verify a month's bill</h2>
      <p class="meta">
        Every receipt of the month, signed and hash-chained, as one file, and the month's signed statement once it has closed. Check them here, or
        offline with <code>tollgate verify {project.id}-{period}.jsonl --statement statement-{project.id}-{period}.json</code> (docs/verification.md).
      </p>
      <div class="grid-form inline">
        <label for="v-month">Month</label>
        <input id="v-month" type="month" value={period} max={thisMonth()} onInput={(e) => pick(e.currentTarget.value)} />
      </div>
      <div class="buttons">
        <button type="button" onClick={run} disabled={busy || !valid}>{busy ? "Working…" : current ? "Export and verify this month's receipts" : `Export and verify the receipts of ${period}`}</button>
        {open ? null : <button type="button" class="secondary" onClick={fetchStatement} disabled={busy || !valid}>{`Get the statement of ${period}`}</button>}
      </div>
      {open && valid
        ? <p class="meta" data-statement="open">{period} is still open: its signed statement is made once the month has ended and nothing of it is still held. Until then the export covers the receipts so far.</p>
        : null}
      <ErrorNote error={error} />
      {file === null ? null : <p><a href={file.url} download={file.name} data-download="export">Download {file.name}</a> ({file.receipts} receipts)</p>}
      {statement === null ? null : (
        <p>
          <a href={statement.url} download={statement.name} data-download="statement">Download {statement.name}</a> (signed; {credits(statement.body.spent)} Credits spent over{" "}
          {credits(statement.body.receipt_count)} receipts, closed {when(statement.body.closed_at)})
        </p>
      )}
      {verdict === null ? null : (
        <div role="status" data-export-verdict={verdict.findings.length === 0 ? "clean" : "findings"}>
          {verdict.findings.length === 0
            ? <p class="ok">✓ {verdict.summary.receipts} receipts: every signature and chain link checks out, and every charge the export's rate cards price ({verdict.summary.keys} key(s), {verdict.summary.rateCards} rate card(s)){verdict.summary.statements > 0 ? "; the statement's totals are the receipts' sums and its signature checks out" : ""}.</p>
            : (
              <>
                <p class="bad">✗ {verdict.findings.length} finding(s) in {verdict.summary.receipts} receipts.</p>
                <ul class="verdict">{verdict.findings.slice(0, 20).map((f) => <li class="bad" title={describeFinding(f.kind)}><code>{f.kind}</code> {f.message}</li>)}</ul>
              </>
            )}
          {verdict.unchecked.map((n) => <p class="meta" data-unchecked>{n}</p>)}
        </div>
      )}
    </section>
  )
}
