import { useState } from "preact/hooks"
import { api, type Session } from "./api.ts"
import { ErrorNote, message } from "./ui.tsx"

/** Sign in with the admin token (operator) or a project key (team, read-only). The token is sent once, in a POST body. */
export const SignIn = ({ notice, onSignedIn }: { notice: string | null; onSignedIn: (s: Session) => void }) => {
  const [token, setToken] = useState("")
  const [error, setError] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const submit = async (e: Event) => {
    e.preventDefault()
    setBusy(true)
    setError(null)
    try {
      const session = await api.signIn(token)
      setToken("")
      onSignedIn(session)
    } catch (err) {
      setError(`Sign-in failed: ${message(err)}`)
    } finally {
      setBusy(false)
    }
  }
  return (
    <main class="signin" id="main">
      <h1>Tollgate</h1>
      <p class="lead">Sign in with the admin token to manage projects and keys, or with a project key to see that project's usage (read-only).</p>
      {notice === null ? null : <p class="notice" role="status">{notice}</p>}
      <form onSubmit={submit} class="card">
        <label for="token">Admin token or project key</label>
        <input id="token" name="token" type="password" autocomplete="current-password" required spellcheck={false} autoFocus
          value={token} onInput={(e) => setToken(e.currentTarget.value)} />
        <button type="submit" disabled={busy}>{busy ? "Signing in…" : "Sign in"}</button>
        <ErrorNote error={error} />
      </form>
      <p class="hint">The token is sent once over this connection and kept by the server as a session cookie the page cannot read.</p>
    </main>
  )
}
