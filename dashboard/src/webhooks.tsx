/**
 * The Webhooks page (issue 42; operator only): the registered endpoints, a form to add one (its signing
 * secret shown once), and an endpoint's delivery log with "Send again". Routes #/webhooks and
 * #/webhooks/<id>. The shapes are the admin API's (src/http/webhooksApi.ts), imported as types only.
 */
import type { Schema } from "effect"
import { useEffect, useState } from "preact/hooks"
import type * as W from "../../src/http/webhooksApi.ts"
import { call, type Page } from "./api.ts"
import { ErrorNote, message, More, Status, usePages, when } from "./ui.tsx"

type Endpoint = Schema.Schema.Encoded<typeof W.WebhookEndpoint>
type WithSecret = Schema.Schema.Encoded<typeof W.WebhookEndpointWithSecret>
type Delivery = Schema.Schema.Encoded<typeof W.WebhookDelivery>

const path = (id: string) => `/admin/v1/webhooks/${encodeURIComponent(id)}`
const cursorQuery = (cursor: string | null) => (cursor === null ? "" : `?cursor=${encodeURIComponent(cursor)}`)
const webhooks = {
  list: (cursor: string | null) => call<Page<Endpoint>>("GET", `/admin/v1/webhooks${cursorQuery(cursor)}`),
  get: (id: string) => call<Endpoint>("GET", path(id)),
  create: (url: string, events: ReadonlyArray<string>) => call<WithSecret>("POST", "/admin/v1/webhooks", { url, events }),
  deliveries: (id: string, cursor: string | null) => call<Page<Delivery>>("GET", `${path(id)}/deliveries${cursorQuery(cursor)}`),
  retry: (id: string, delivery: string) => call<Delivery>("POST", `${path(id)}/deliveries/${encodeURIComponent(delivery)}/retry`)
}

/** Run an action of the page: its error shown in the page's note (cleared first), the page's list read again after it. */
const action = (setError: (e: string | null) => void, reload: () => void) => async (work: () => Promise<void>) => {
  setError(null)
  try {
    await work()
    reload()
  } catch (err) {
    setError(message(err))
  }
}

/** #/webhooks: the endpoints, and a form to add one. */
export const WebhooksPage = () => {
  const [first, setFirst] = useState<Page<Endpoint> | null>(null)
  const list = usePages(first, webhooks.list)
  const [error, setError] = useState<string | null>(null)
  const [url, setUrl] = useState("")
  const [events, setEvents] = useState("*")
  const [created, setCreated] = useState<WithSecret | null>(null)
  const load = () => void webhooks.list(null).then(setFirst, (e) => setError(message(e)))
  useEffect(load, [])
  const create = (e: Event) => {
    e.preventDefault()
    return action(setError, load)(async () => {
      setCreated(await webhooks.create(url, events.split(",").map((s) => s.trim()).filter((s) => s !== "")))
      setUrl("")
    })
  }
  return (
    <>
      <h1>Webhooks</h1>
      <ErrorNote error={error ?? list.error} />
      {created === null ? null : (
        <p class="notice" role="status" data-secret>
          Endpoint <code>{created.id}</code> added. Its signing secret, shown once — store it now: <code>{created.secret}</code>
        </p>
      )}
      {list.items === null ? <p role="status">Loading…</p> : list.items.length === 0 ? <p>No endpoints yet.</p> : (
        <table class="webhooks">
          <thead><tr><th>Endpoint</th><th>URL</th><th>Events</th><th>Enabled</th></tr></thead>
          <tbody>
            {list.items.map((w) => (
              <tr data-endpoint={w.id}>
                <td><a href={`#/webhooks/${w.id}`}><code>{w.id}</code></a></td>
                <td>{w.url}</td>
                <td>{w.events.join(", ")}</td>
                <td>{w.enabled ? "yes" : "no"}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <More list={list} label="More endpoints" />
      <section class="card" aria-labelledby="new-webhook">
        <h2 id="new-webhook">New endpoint</h2>
        <form onSubmit={create} class="grid-form">
          <label for="w-url">URL (https)</label>
          <input id="w-url" type="url" required value={url} onInput={(e) => setUrl(e.currentTarget.value)} />
          <label for="w-events">Events (comma-separated, or *)</label>
          <input id="w-events" required value={events} onInput={(e) => setEvents(e.currentTarget.value)} />
          <button type="submit">Add endpoint</button>
        </form>
      </section>
    </>
  )
}

/** #/webhooks/<id>: an endpoint and its delivery log, newest first, each with "Send again". */
export const WebhookPage = ({ id }: { id: string }) => {
  const [endpoint, setEndpoint] = useState<Endpoint | null>(null)
  const [first, setFirst] = useState<Page<Delivery> | null>(null)
  const list = usePages(first, (cursor) => webhooks.deliveries(id, cursor))
  const [error, setError] = useState<string | null>(null)
  const [notice, setNotice] = useState<string | null>(null)
  const load = () => void webhooks.deliveries(id, null).then(setFirst, (e) => setError(message(e)))
  useEffect(() => {
    webhooks.get(id).then(setEndpoint, (e) => setError(message(e)))
    load()
  }, [id])
  const again = (d: Delivery) =>
    action(setError, load)(async () => {
      const made = await webhooks.retry(id, d.id)
      setNotice(`Event ${made.event_id} queued again as ${made.id}.`)
    })
  return (
    <>
      <h1>Webhook endpoint</h1>
      <p><a href="#/webhooks">All endpoints</a></p>
      <ErrorNote error={error ?? list.error} />
      {notice === null ? null : <p class="notice" role="status">{notice}</p>}
      {endpoint === null ? null : <p class="meta"><code>{endpoint.id}</code> · {endpoint.url} · {endpoint.events.join(", ")}</p>}
      <h2>Deliveries</h2>
      {list.items === null ? <p role="status">Loading…</p> : list.items.length === 0 ? <p>No deliveries yet.</p> : (
        <table class="deliveries">
          <thead><tr><th>Event</th><th>Type</th><th>Status</th><th>Attempts</th><th>Last answer</th><th>Latency</th><th>Next attempt</th><th></th></tr></thead>
          <tbody>
            {list.items.map((d) => (
              <tr data-delivery={d.id}>
                <td><code>{d.event_id}</code></td>
                <td>{d.event_type}</td>
                <td><Status value={d.status} /></td>
                <td>{d.attempts}</td>
                <td>{d.last_status_code ?? d.last_error ?? "—"}</td>
                <td>{d.last_latency_ms === null ? "—" : `${d.last_latency_ms} ms`}</td>
                <td>{when(d.next_attempt_at)}</td>
                <td><button type="button" class="secondary" onClick={() => void again(d)}>Send again</button></td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <More list={list} label="More deliveries" />
    </>
  )
}
