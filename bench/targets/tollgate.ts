/**
 * Bench child: Tollgate with full governance on the embedded default store — the same layer graph
 * as `npm start` (ServerLive), a SQLite file in a fresh temp dir with its durability settings
 * (WAL, synchronous=FULL), one openai-type provider pointing at the mock upstream, and a default
 * project whose budget and rate limit are too large to ever bind (the bench measures cost, not
 * refusals). Prints one JSON line `{"ready":true,"port":N,"key":"tg_dev_…","dbPath":…}`.
 */
import { Option, Redacted } from "effect"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { makeSettings } from "../../src/domain/config.ts"
import { timeline } from "../../src/domain/timeline.ts"
import { arg, flag } from "../lib/args.ts"
import { installProfilers } from "../lib/profilers.ts"
import { benchGateway, startServer } from "./server.ts"

const upstream = (arg("--upstream") ?? "http://127.0.0.1:9100").replace(/\/+$/, "")
const model = arg("--model") ?? "gpt-4o-mini"
const dir = mkdtempSync(join(tmpdir(), "tollgate-bench-"))
const dbPath = join(dir, "tollgate.db")

const gateway = benchGateway(upstream, model)

const settings = makeSettings({
  port: Number(arg("--port") ?? "0"),
  host: "127.0.0.1",
  // `--db memory` is for diagnosis only (how much of the cost is the disk): the bench always uses the file.
  databaseUrl: arg("--db") === "memory" ? "sqlite::memory:" : `sqlite:${dbPath}`,
  adminToken: Option.some(Redacted.make(arg("--admin-token") ?? "bench-admin-token")),
  // `--access-log`: one JSON line per request on stdout, as `npm start` does by default (the bench
  // measures governance without it unless asked).
  accessLog: flag("--access-log"),
  upstreamTimeoutMs: 30_000,
  upstreamDeadlineMs: 60_000,
  gateway
})

const ready = await startServer(settings)
// `--profile` / `--alloc-profile` (bench/profile.ts): bench/lib/profilers.ts.
await installProfilers()
// `--timeline FILE` with TOLLGATE_TIMELINE=1 (bench/timeline.ts): SIGUSR1 writes the per-stage figures
// and the slowest calls' attribution of the calls since the previous SIGUSR1 to FILE
// (src/domain/timeline.ts) and starts over.
const timelineFile = arg("--timeline")
if (timelineFile !== undefined) {
  process.on("SIGUSR1", () => {
    writeFileSync(timelineFile, JSON.stringify({ stages: timeline.report(), tail: timeline.tail() }))
    timeline.reset()
  })
}
// `--webhook` (bench/threads.ts target tollgate-webhook): an endpoint registered for every event type.
if (flag("--webhook")) {
  const res = await fetch(`http://127.0.0.1:${ready.port}/admin/v1/webhooks`, {
    method: "POST",
    headers: { authorization: `Bearer ${arg("--admin-token") ?? "bench-admin-token"}`, "content-type": "application/json" },
    body: JSON.stringify({ url: `${upstream}/webhook-sink`, events: ["*"] })
  })
  if (res.status !== 201) throw new Error(`registering the bench's webhook endpoint: ${res.status} ${await res.text()}`)
}
// `--scoped` (bench/threads.ts target tollgate-scoped, issue 41): the default key has a budget of its own
// and the project a default budget for each end user, both far from binding; the bench's calls name
// end users, so each call is held in its project, its key and its end user.
if (flag("--scoped")) {
  const admin = (method: string, path: string, body: unknown) =>
    fetch(`http://127.0.0.1:${ready.port}${path}`, {
      method,
      headers: { authorization: `Bearer ${arg("--admin-token") ?? "bench-admin-token"}`, "content-type": "application/json" },
      body: JSON.stringify(body)
    })
  const projects = (await (await fetch(`http://127.0.0.1:${ready.port}/admin/v1/projects`, { headers: { authorization: `Bearer ${arg("--admin-token") ?? "bench-admin-token"}` } })).json()) as {
    data: Array<{ id: string }>
  }
  const project = projects.data[0]!.id
  const keys = (await (await fetch(`http://127.0.0.1:${ready.port}/admin/v1/projects/${project}/keys`, { headers: { authorization: `Bearer ${arg("--admin-token") ?? "bench-admin-token"}` } })).json()) as {
    data: Array<{ id: string }>
  }
  for (const [path, body] of [[`/admin/v1/keys/${keys.data[0]!.id}`, { budget_credits: 1e15 }], [`/admin/v1/projects/${project}/end_user_budget`, { end_user_budget_credits: 1e14 }]] as const) {
    const res = await admin("PATCH", path, body)
    if (res.status !== 200) throw new Error(`setting the bench's scoped budgets (${path}): ${res.status} ${await res.text()}`)
  }
}
process.stdout.write(JSON.stringify({ ready: true, port: ready.port, key: ready.key, dbPath }) + "\n")

const stop = () =>
  void ready.dispose().finally(() => {
    if (!flag("--keep-db")) rmSync(dir, { recursive: true, force: true })
    process.exit(0)
  })
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
