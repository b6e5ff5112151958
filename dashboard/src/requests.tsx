import { useEffect, useState } from "preact/hooks"
import { api, ENVIRONMENTS, type ReceiptView, type RequestEntry, type RequestPage, type Session } from "./api.ts"
import { ErrorNote, message, Status, when } from "./ui.tsx"
import { type Verdict, verifyReceipt } from "./verify.ts"

interface Filter {
  environment: string
  status: string
  model: string
  q: string
}

/** The request log of a project: search, filters, pages newest first (keyset cursor). */
export const RequestsPage = ({ projectId, session }: { projectId: string; session: Session }) => {
  const [filter, setFilter] = useState<Filter>({ environment: "", status: "", model: "", q: "" })
  const [draft, setDraft] = useState<Filter>(filter)
  // The cursors of the pages before this one, to go back.
  const [cursors, setCursors] = useState<ReadonlyArray<string | null>>([null])
  const [page, setPage] = useState<RequestPage | null>(null)
  const [error, setError] = useState<string | null>(null)
  const cursor = cursors[cursors.length - 1] ?? null
  useEffect(() => {
    api.requests(projectId, { ...filter, cursor, limit: "20" }).then((p) => { setPage(p); setError(null) }, (e) => setError(message(e)))
  }, [projectId, filter, cursor])
  const set = (k: keyof Filter) => (e: Event) => setDraft({ ...draft, [k]: (e.currentTarget as HTMLInputElement).value })
  return (
    <>
      <h1>Requests and receipts</h1>
      <nav class="tabs" aria-label="Project"><a href={`#/projects/${projectId}`}>Overview</a><a href={`#/projects/${projectId}/requests`} aria-current="page">Requests and receipts</a></nav>
      <form class="filters card" role="search" onSubmit={(e) => { e.preventDefault(); setCursors([null]); setFilter(draft) }}>
        <span class="field"><label for="f-q">Search</label>
        <input id="f-q" type="search" size={30} placeholder="request id, receipt id, idempotency key, model" value={draft.q} onInput={set("q")} /></span>
        {session.role === "operator" ? (
          <>
            <span class="field"><label for="f-env">Environment</label>
            <select id="f-env" value={draft.environment} onChange={set("environment")}>
              <option value="">All</option>
              {ENVIRONMENTS.map((env) => <option value={env}>{env}</option>)}
            </select></span>
          </>
        ) : null}
        <span class="field"><label for="f-status">Status</label>
        <select id="f-status" value={draft.status} onChange={set("status")}>
          <option value="">Any</option><option value="completed">completed</option><option value="failed">failed</option><option value="pending">pending</option>
        </select></span>
        <span class="field"><label for="f-model">Model</label>
        <input id="f-model" size={12} value={draft.model} onInput={set("model")} /></span>
        <button type="submit">Apply</button>
      </form>
      <ErrorNote error={error} />
      {page === null ? <p role="status">Loading…</p> : page.data.length === 0 ? <p role="status">No requests match.</p> : (
        <div class="table-wrap card">
          <table data-table="requests">
            <caption class="sr-only">Requests, newest first</caption>
            <thead><tr><th scope="col">Time (UTC)</th><th scope="col">Request</th><th scope="col">Status</th><th scope="col">Model</th><th scope="col" class="num">Charge</th><th scope="col">Verification</th><th scope="col">Env</th></tr></thead>
            <tbody>
              {page.data.map((r) => (
                <tr data-request={r.id}>
                  <td>{when(r.created_at)}</td>
                  <td><a href={`#/projects/${projectId}/requests/${r.id}`}><code>{r.id}</code></a></td>
                  <td><Status value={r.status} />{r.error === null ? null : <div class="meta">{r.error.code}</div>}</td>
                  <td>{r.model}{r.route !== null && r.route !== r.model ? <span class="meta"> → {r.route}</span> : null}</td>
                  <td class="num">{r.credits_charged ?? "—"}</td>
                  <td>{r.verification === null ? "—" : <Status value={r.verification.state} />}</td>
                  <td>{r.environment}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <div class="pager">
        <button type="button" class="secondary" disabled={cursors.length <= 1} onClick={() => setCursors(cursors.slice(0, -1))}>Newer</button>
        <span>Page {cursors.length}</span>
        <button type="button" class="secondary" disabled={page === null || !page.has_more} onClick={() => page?.next_cursor && setCursors([...cursors, page.next_cursor])}>Older</button>
      </div>
    </>
  )
}

/** One request: its attempts and verification, and its receipt with the chain link and an in-browser check. */
export const RequestDetail = ({ projectId, requestId }: { projectId: string; requestId: string }) => {
  const [request, setRequest] = useState<RequestEntry | null>(null)
  const [receipt, setReceipt] = useState<ReceiptView | null>(null)
  const [verdict, setVerdict] = useState<Verdict | null>(null)
  const [error, setError] = useState<string | null>(null)
  const [checking, setChecking] = useState(false)
  useEffect(() => {
    setVerdict(null)
    setReceipt(null)
    api.request(projectId, requestId).then((r) => {
      setRequest(r)
      if (r.receipt_id !== null) api.receipt(projectId, requestId).then(setReceipt, (e) => setError(message(e)))
    }, (e) => setError(message(e)))
  }, [projectId, requestId])
  const verify = async () => {
    if (receipt === null) return
    setChecking(true)
    try {
      setVerdict(await verifyReceipt(receipt.receipt, await api.receiptKeys()))
    } catch (e) {
      setError(message(e))
    } finally {
      setChecking(false)
    }
  }
  const back = <p><a href={`#/projects/${projectId}/requests`}>← All requests</a></p>
  if (request === null) return <>{back}<ErrorNote error={error} />{error === null ? <p role="status">Loading…</p> : null}</>
  const chainOk = receipt === null ? null : receipt.previous === null ? receipt.receipt.seq === 1 && /^0{64}$/.test(receipt.receipt.prev_hash) : receipt.previous.hash === receipt.receipt.prev_hash
  return (
    <>
      {back}
      <h1>Request <code>{request.id}</code></h1>
      <ErrorNote error={error} />
      <section class="card" aria-labelledby="req-h">
        <h2 id="req-h">Request</h2>
        <dl class="fields">
          <dt>Status</dt><dd><Status value={request.status} />{request.error === null ? null : ` ${request.error.code}: ${request.error.message ?? ""}`}</dd>
          <dt>Endpoint</dt><dd><code>{request.endpoint}</code>{request.stream ? " (stream)" : ""}</dd>
          <dt>Model → route</dt><dd>{request.model} → {request.route ?? "—"}</dd>
          <dt>Environment</dt><dd>{request.environment}</dd>
          <dt>Key</dt><dd><code>{request.key_id}</code></dd>
          <dt>Idempotency key</dt><dd>{request.idempotency_key ?? "—"}</dd>
          <dt>Credits</dt><dd>reserved {request.credits_reserved}, charged <span data-field="charged">{request.credits_charged ?? "—"}</span> ({request.rate_card_version ?? "no rate card"})</dd>
          <dt>Verification</dt><dd>{request.verification === null ? "—" : <><Status value={request.verification.state} /> checks: {request.verification.checks.join(", ") || "none"}{request.verification.failed_checks.length > 0 ? `; failed: ${request.verification.failed_checks.join(", ")}` : ""}</>}</dd>
          <dt>Started</dt><dd>{when(request.created_at)}</dd>
          <dt>Finished</dt><dd>{when(request.completed_at)}</dd>
        </dl>
        <h3>Attempts</h3>
        <div class="table-wrap">
          <table data-table="attempts">
            <thead><tr><th scope="col">#</th><th scope="col">Route</th><th scope="col">Provider</th><th scope="col">Outcome</th><th scope="col">Upstream status</th><th scope="col" class="num">Time (ms)</th></tr></thead>
            <tbody>{request.attempts.map((a, i) => <tr><td>{i + 1}</td><td>{a.route}</td><td>{a.provider}</td><td><Status value={a.outcome} />{a.error === undefined ? null : <div class="meta">{a.error}</div>}</td><td>{a.status ?? "—"}</td><td class="num">{Math.round(a.duration_ms)}</td></tr>)}</tbody>
          </table>
        </div>
      </section>
      {receipt === null ? (request.receipt_id === null ? <p class="meta">No receipt: only settled requests have one.</p> : <p role="status">Loading receipt…</p>) : (
        <section class="card" aria-labelledby="rcpt-h">
          <h2 id="rcpt-h">Receipt <code>{receipt.receipt.receipt_id}</code></h2>
          <dl class="fields">
            <dt>Charged</dt><dd>{receipt.receipt.credits_charged} Credits (reserved {receipt.receipt.credits_reserved}) under {receipt.receipt.rate_card_version}</dd>
            <dt>Tokens</dt><dd>{Object.entries(receipt.receipt.tokens).map(([k, v]) => `${k} ${v}`).join(" · ")}</dd>
            <dt>Chain position</dt><dd>#{receipt.receipt.seq} of {receipt.receipt.project_id}, period {receipt.receipt.period}</dd>
            <dt>Previous receipt</dt>
            <dd>{receipt.previous === null ? "none (first of the chain)" : receipt.previous.environment === request.environment
              ? <a href={`#/projects/${projectId}/requests/${receipt.previous.request_id}`}>#{receipt.previous.seq} <code>{receipt.previous.request_id}</code></a>
              : <>#{receipt.previous.seq} (in {receipt.previous.environment})</>}</dd>
            <dt>Next receipt</dt>
            <dd>{receipt.next === null ? "none yet" : receipt.next.environment === request.environment
              ? <a href={`#/projects/${projectId}/requests/${receipt.next.request_id}`}>#{receipt.next.seq} <code>{receipt.next.request_id}</code></a>
              : <>#{receipt.next.seq} (in {receipt.next.environment})</>}</dd>
            <dt>prev_hash</dt><dd><code class="hash">{receipt.receipt.prev_hash}</code></dd>
            <dt>hash</dt><dd><code class="hash">{receipt.receipt.hash}</code></dd>
            <dt>Signature</dt><dd><code class="hash">{receipt.receipt.signature}</code> by <code>{receipt.receipt.signing_key_id}</code></dd>
          </dl>
          <button type="button" onClick={verify} disabled={checking}>{checking ? "Verifying…" : "Verify receipt in this browser"}</button>
          {verdict === null ? null : (
            <ul class="verdict" role="status" data-verdict={verdict.hash && verdict.signature && chainOk ? "valid" : "invalid"}>
              <li class={verdict.hash ? "ok" : "bad"}>{verdict.hash ? "✓" : "✗"} Hash: SHA-256 of the canonical JSON {verdict.hash ? "matches" : "does NOT match"}</li>
              <li class={verdict.signature ? "ok" : "bad"}>{verdict.signature ? "✓" : "✗"} Signature: Ed25519 with {receipt.receipt.signing_key_id} {verdict.keyFound ? (verdict.signature ? "is valid" : "is NOT valid") : "— key not published"} ({verdict.engine})</li>
              <li class={chainOk ? "ok" : "bad"}>{chainOk ? "✓" : "✗"} Chain: prev_hash {chainOk ? "equals" : "does NOT equal"} the previous receipt's hash</li>
            </ul>
          )}
          <details><summary>Receipt JSON</summary><pre class="json">{JSON.stringify(receipt.receipt, null, 2)}</pre></details>
        </section>
      )}
    </>
  )
}
