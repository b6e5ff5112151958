/**
 * The admin lists with many rows (issue 38, finding 4): a gateway on a SQLite file holding `--projects`
 * projects (each with this month's budget window) and one project with `--keys` keys, written straight
 * into the store; then, through HTTP, GET /admin/v1/projects (the default page) and a walk over every
 * page, a project's keys likewise, GET /admin/v1/projects/{id}, and /healthz while 8 listings run at once.
 *
 *   npx tsx bench/adminLists.ts [--projects 10000] [--keys 5000]
 */
import Database from "better-sqlite3"
import { parseArgs } from "node:util"
import { periodOf } from "../spec/ledger.ts"
import { mockGatewayFile, startGateway } from "../test/support/gateway.ts"
import { startMockUpstream } from "../test/support/mockUpstream.ts"

const { values } = parseArgs({ options: { projects: { type: "string", default: "10000" }, keys: { type: "string", default: "5000" } } })
const projects = Number(values.projects)
const keys = Number(values.keys)

const upstream = await startMockUpstream()
const gw = await startGateway(mockGatewayFile(upstream.url), { assertInvariants: false })
const seed = new Database(gw.dbPath)
seed.pragma("busy_timeout = 5000")
const period = periodOf(Date.now())
const base = Date.now() - projects
seed.transaction(() => {
  const project = seed.prepare("INSERT INTO projects VALUES (?, 'org_bench', ?, 1000000, 600, 60, ?, ?)")
  const window = seed.prepare("INSERT INTO budget_windows (project_id, period, spent, reserved) VALUES (?, ?, ?, 0)")
  for (let i = 0; i < projects; i++) {
    const id = `prj_bench${String(i).padStart(6, "0")}`
    project.run(id, `bench project ${i}`, base + i, base + i)
    window.run(id, period, i)
  }
  const key = seed.prepare("INSERT INTO api_keys (id, project_id, environment, secret_sha256, created_at) VALUES (?, ?, 'development', ?, ?)")
  for (let i = 0; i < keys; i++) key.run(`key_bench${String(i).padStart(6, "0")}`, gw.projectId, "0".repeat(64), base + i)
})()
seed.close()

const get = async (path: string) => {
  const started = performance.now()
  const res = await fetch(`${gw.origin}${path}`, { headers: { authorization: `Bearer ${gw.adminToken}` } })
  const text = await res.text()
  if (res.status !== 200) throw new Error(`${path}: ${res.status} ${text.slice(0, 200)}`)
  return { ms: performance.now() - started, bytes: Buffer.byteLength(text), body: JSON.parse(text) as { data: Array<unknown>; keys?: Array<unknown>; has_more?: boolean; next_cursor?: string | null } }
}

/** Every page of a list, following next_cursor (a list without paging is one page). */
const walk = async (path: string) => {
  let ms = 0
  let bytes = 0
  let pages = 0
  let items = 0
  let cursor: string | null | undefined
  do {
    const page = await get(cursor === undefined ? path : `${path}${path.includes("?") ? "&" : "?"}cursor=${encodeURIComponent(cursor!)}`)
    ms += page.ms
    bytes += page.bytes
    pages++
    items += page.body.data.length
    cursor = page.body.has_more === true ? page.body.next_cursor : null
  } while (cursor !== null && cursor !== undefined)
  return { ms, bytes, pages, items }
}

const kb = (n: number) => `${(n / 1024).toFixed(1)} KB`
const line = (what: string, r: { ms: number; bytes: number; body: { data?: Array<unknown>; keys?: Array<unknown> } }) =>
  console.log(`${what}: ${kb(r.bytes)}, ${r.ms.toFixed(1)} ms, ${(r.body.data ?? r.body.keys)?.length} items`)

await get("/admin/v1/projects") // warm up
line(`GET /admin/v1/projects (${projects + 1} projects)`, await get("/admin/v1/projects"))
line("GET /admin/v1/projects?limit=100", await get("/admin/v1/projects?limit=100"))
const all = await walk("/admin/v1/projects?limit=100")
console.log(`walk of every project, 100 a page: ${all.pages} pages, ${all.items} items, ${kb(all.bytes)}, ${all.ms.toFixed(0)} ms`)
line(`GET /admin/v1/projects/{id}/keys (${keys} keys)`, await get(`/admin/v1/projects/${gw.projectId}/keys`))
const allKeys = await walk(`/admin/v1/projects/${gw.projectId}/keys?limit=100`)
console.log(`walk of every key, 100 a page: ${allKeys.pages} pages, ${allKeys.items} items, ${kb(allKeys.bytes)}, ${allKeys.ms.toFixed(0)} ms`)
line("GET /admin/v1/projects/{id}", await get(`/admin/v1/projects/${gw.projectId}`))

// /healthz while 8 default listings run at once.
const listings = Promise.all(Array.from({ length: 8 }, () => get("/admin/v1/projects")))
const health = await get("/healthz").catch(async () => ({ ms: NaN, bytes: 0 }))
const done = await listings
console.log(`/healthz during 8 listings at once: ${health.ms.toFixed(1)} ms (the listings: ${Math.max(...done.map((d) => d.ms)).toFixed(0)} ms at most)`)

await gw.close()
await upstream.close()
