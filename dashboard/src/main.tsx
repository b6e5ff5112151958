/**
 * Tollgate's dashboard: a Preact single-page app under /dashboard with hash routes
 *   #/projects · #/projects/<id> · #/projects/<id>/requests · #/projects/<id>/requests/<request id>
 *   #/webhooks · #/webhooks/<endpoint id> (operator)
 * Hash routes keep every screen one static file on the server; nothing secret is ever in them.
 */
import { render } from "preact"
import { useEffect, useRef, useState } from "preact/hooks"
import { api, type Session, whenSessionLost } from "./api.ts"
import { ProjectPage } from "./project.tsx"
import { Projects } from "./projects.tsx"
import { RequestDetail, RequestsPage } from "./requests.tsx"
import { SignIn } from "./signin.tsx"
import { WebhookPage, WebhooksPage } from "./webhooks.tsx"
import "./style.css"

const useHash = () => {
  const [hash, setHash] = useState(location.hash)
  useEffect(() => {
    const on = () => setHash(location.hash)
    addEventListener("hashchange", on)
    return () => removeEventListener("hashchange", on)
  }, [])
  return hash
}

const go = (hash: string) => {
  location.hash = hash
}

const routeOf = (hash: string) => hash.replace(/^#\/?/, "").split("/").filter((p) => p.length > 0).map(decodeURIComponent)

const Screen = ({ hash, session }: { hash: string; session: Session }) => {
  const parts = routeOf(hash)
  const home = session.role === "team" ? `#/projects/${session.project_id}` : "#/projects"
  useEffect(() => {
    // An effect runs after the paint; by then the address may have moved on (a link followed, a
    // bookmark opened right after signing in). Redirect only from where the page still is, never
    // from the hash this render saw.
    const now = routeOf(location.hash)
    if (now.length === 0 || (session.role === "team" && now[0] === "projects" && now.length === 1)) go(home)
  }, [hash])
  if (parts[0] === "webhooks" && session.role === "operator") return parts[1] === undefined ? <WebhooksPage /> : <WebhookPage id={parts[1]} />
  if (parts[0] !== "projects") return <p>Unknown page. <a href={home}>Go to the start page.</a></p>
  const [, id, section, requestId] = parts
  if (id === undefined) return session.role === "operator" ? <Projects go={go} /> : null
  if (section === "requests" && requestId !== undefined) return <RequestDetail projectId={id} requestId={requestId} />
  if (section === "requests") return <RequestsPage projectId={id} session={session} />
  return <ProjectPage id={id} session={session} />
}

const App = () => {
  const [session, setSession] = useState<Session | null | undefined>(undefined)
  const [notice, setNotice] = useState<string | null>(null)
  const hash = useHash()
  useEffect(() => {
    whenSessionLost(() => {
      setNotice("Your session has ended (it expired, was signed out, or its key no longer works). Sign in again.")
      setSession(null)
    })
    api.session().then(setSession, () => setSession(null))
  }, [])
  // Each screen change (not the first load) moves focus to the page heading, for keyboard and
  // screen-reader users; the sign-in screen focuses its field instead.
  const loaded = useRef(false)
  useEffect(() => {
    if (session === undefined) return
    if (!loaded.current || session === null) {
      loaded.current = true
      return
    }
    const t = setTimeout(() => document.querySelector<HTMLElement>("main h1")?.focus(), 50)
    return () => clearTimeout(t)
  }, [hash, session])
  if (session === undefined) return <p role="status">Loading…</p>
  if (session === null) return <SignIn notice={notice} onSignedIn={(s) => { setNotice(null); setSession(s) }} />
  const signOut = () => api.signOut().finally(() => { setNotice("Signed out."); setSession(null); go("#/") })
  return (
    <>
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); document.getElementById("main")?.focus() }}>Skip to content</a>
      <header class="top">
        <a class="brand" href={session.role === "team" ? `#/projects/${session.project_id}` : "#/projects"}>Tollgate</a>
        <span class="who" data-role={session.role}>{session.role === "operator" ? "Operator" : `Team · ${session.environment}`}</span>
        {session.role === "operator" ? <a href="#/webhooks" class="docs">Webhooks</a> : null}
        <a href="/docs" class="docs">API reference</a>
        <button type="button" class="secondary" onClick={signOut}>Sign out</button>
      </header>
      <main id="main" tabIndex={-1}>
        <Screen hash={hash} session={session} />
      </main>
    </>
  )
}

// Headings take focus programmatically (see above), never by Tab.
new MutationObserver(() => document.querySelectorAll("main h1:not([tabindex])").forEach((h) => h.setAttribute("tabindex", "-1"))).observe(document.body, { childList: true, subtree: true })

render(<App />, document.getElementById("app")!)
