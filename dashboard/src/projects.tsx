import { useEffect, useState } from "preact/hooks"
import { api, type Page, type ProjectSummary } from "./api.ts"
import { BudgetBar, credits, ErrorNote, message, More, usePages } from "./ui.tsx"

/** The operator's list of projects, oldest first a page at a time, each with its window's budget bar, and a form to create one. */
export const Projects = ({ go }: { go: (hash: string) => void }) => {
  const [first, setFirst] = useState<Page<ProjectSummary> | null>(null)
  const list = usePages(first, api.projects)
  const projects = list.items
  const [error, setError] = useState<string | null>(null)
  const [name, setName] = useState("")
  const [budget, setBudget] = useState("100000")
  const [rpm, setRpm] = useState("600")
  const [burst, setBurst] = useState("")
  const [creating, setCreating] = useState(false)

  useEffect(() => void api.projects(null).then(setFirst, (e) => setError(message(e))), [])

  const create = async (e: Event) => {
    e.preventDefault()
    setCreating(true)
    setError(null)
    try {
      const project = await api.createProject({
        name,
        budget_credits: Number(budget),
        rate_limit: { requests_per_minute: Number(rpm), ...(burst === "" ? {} : { burst: Number(burst) }) }
      })
      go(`#/projects/${project.id}`)
    } catch (err) {
      setError(message(err))
    } finally {
      setCreating(false)
    }
  }

  return (
    <>
      <h1>Projects</h1>
      <ErrorNote error={error ?? list.error} />
      {projects === null ? <p role="status">Loading…</p> : (
        <ul class="project-list">
          {projects.map((p) => (
            <li class="card" data-project={p.id}>
              <h2><a href={`#/projects/${p.id}`}>{p.name}</a></h2>
              <p class="meta"><code>{p.id}</code> · {p.organization} · {credits(p.rate_limit.requests_per_minute)} req/min, burst {p.rate_limit.burst}</p>
              <BudgetBar window={p.current_window} label={`${p.name} budget`} />
            </li>
          ))}
        </ul>
      )}
      <More list={list} label="More projects" />
      <section class="card" aria-labelledby="new-project">
        <h2 id="new-project">New project</h2>
        <form onSubmit={create} class="grid-form">
          <label for="p-name">Name</label>
          <input id="p-name" required value={name} onInput={(e) => setName(e.currentTarget.value)} />
          <label for="p-budget">Budget cap (Credits per month)</label>
          <input id="p-budget" type="number" min="0" step="1" required value={budget} onInput={(e) => setBudget(e.currentTarget.value)} />
          <label for="p-rpm">Requests per minute</label>
          <input id="p-rpm" type="number" min="1" step="1" required value={rpm} onInput={(e) => setRpm(e.currentTarget.value)} />
          <label for="p-burst">Burst (optional)</label>
          <input id="p-burst" type="number" min="1" step="1" value={burst} onInput={(e) => setBurst(e.currentTarget.value)} />
          <button type="submit" disabled={creating}>Create project</button>
        </form>
      </section>
    </>
  )
}
