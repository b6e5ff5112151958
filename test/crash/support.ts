/**
 * The crash harness's support: the real server as its own process (`src/main.ts`, the same entry as
 * `npm start`), clients that record exactly what they were answered, and read-only checks of the store.
 *
 * The server is bundled once per test file by scripts/build.mjs, exactly as `npm start` runs it (a
 * tsx start costs ≈ 10 s of transpiling on this shared box, and the harness starts dozens of processes).
 */
import Database from "better-sqlite3"
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { dirname, join, resolve } from "node:path"
import { tmpdir } from "node:os"
import { fileURLToPath } from "node:url"
import { auditStore } from "../../src/cli/audit.ts"
import { mockGatewayFile } from "../support/gateway.ts"

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..")
export const ADMIN_TOKEN = "crash-admin-token"

/**
 * Bundle the server as `npm start` runs it (scripts/build.mjs, the one way a bundle is made), into a
 * folder inside the checkout (.tollgate/, ignored) so better-sqlite3 resolves from node_modules.
 */
export const buildServer = async (): Promise<{ readonly main: string; readonly dispose: () => void }> => {
  mkdirSync(join(ROOT, ".tollgate"), { recursive: true })
  const outdir = mkdtempSync(join(ROOT, ".tollgate", "crash-"))
  const built = spawnSync(process.execPath, [join(ROOT, "scripts/build.mjs"), join(ROOT, "src/main.ts"), outdir], { encoding: "utf8" })
  if (built.status !== 0) throw new Error(`scripts/build.mjs failed: ${built.stderr}`)
  return { main: join(outdir, "main.mjs"), dispose: () => rmSync(outdir, { recursive: true, force: true }) }
}

export interface Store {
  readonly dir: string
  readonly dbPath: string
  readonly configPath: string
  readonly dispose: () => void
}

/** A fresh store directory and a gateway config routed to the mock upstream. */
export const newStore = (upstreamUrl: string): Store => {
  mkdirSync(join(tmpdir()), { recursive: true })
  const dir = mkdtempSync(join(tmpdir(), "tollgate-crash-"))
  const configPath = join(dir, "gateway.json")
  writeFileSync(
    configPath,
    JSON.stringify({
      ...mockGatewayFile(upstreamUrl, [{ name: "gpt-test", provider: "mock", upstream_model: "mock-model", max_output_tokens: 256, auto: true }]),
      default_project: { budget_credits: 1_000_000_000, requests_per_minute: 1_000_000, burst: 100_000 }
    })
  )
  return { dir, dbPath: join(dir, "tollgate.db"), configPath, dispose: () => rmSync(dir, { recursive: true, force: true }) }
}

export interface Proc {
  readonly child: ChildProcess
  readonly origin: string
  /** Printed on the store's first start only. */
  readonly devKey: string | undefined
  /** ms from spawn to listening (recovery of dead epochs happens before the server listens). */
  readonly startMs: number
  readonly exited: Promise<{ readonly code: number | null; readonly signal: NodeJS.Signals | null }>
  readonly output: () => string
}

/** Start the real server on `store`; resolves once it listens. */
export const spawnGateway = (main: string, store: Store, env: Record<string, string> = {}): Promise<Proc> =>
  new Promise((resolvePromise, reject) => {
    const t0 = performance.now()
    const child = spawn(process.execPath, [main], {
      cwd: store.dir,
      env: {
        PATH: process.env.PATH ?? "",
        PORT: "0",
        HOST: "127.0.0.1",
        DATABASE_URL: `sqlite:${store.dbPath}`,
        TOLLGATE_CONFIG: store.configPath,
        TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN,
        TOLLGATE_ACCESS_LOG: "false",
        TOLLGATE_INSTANCE_ID: "crash-harness",
        TOLLGATE_HEARTBEAT_MS: "100",
        TOLLGATE_UPSTREAM_TIMEOUT_MS: "5000",
        TOLLGATE_UPSTREAM_DEADLINE_MS: "10000",
        ...env
      },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let out = ""
    let done = false
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => child.once("exit", (code, signal) => r({ code, signal })))
    const onData = (chunk: Buffer) => {
      out = (out + chunk.toString("utf8")).slice(-200_000)
      const listening = /listening on http:\/\/localhost:(\d+)/.exec(out)
      if (!done && listening !== null) {
        done = true
        const key = /development key: (tg_\S+)/.exec(out)
        resolvePromise({ child, origin: `http://127.0.0.1:${listening[1]}`, devKey: key?.[1], startMs: performance.now() - t0, exited, output: () => out })
      }
    }
    child.stdout!.on("data", onData)
    child.stderr!.on("data", onData)
    void exited.then(({ code, signal }) => {
      if (!done) {
        done = true
        reject(new Error(`gateway exited before listening (code ${code}, signal ${signal}):\n${out.slice(-3000)}`))
      }
    })
  })

/** What one call was answered. */
export interface Answer {
  readonly status: number | "cut"
  readonly ms: number
  readonly replayed: boolean
  /** The governance the client received (JSON body, or a stream's last event). */
  readonly governance: { readonly receipt_id: string; readonly credits_charged: number; readonly request_id: string } | undefined
  /** Stream: content chunks received, and when the first arrived (performance.now()). */
  readonly contentChunks: number
  readonly firstContentAt: number | undefined
  readonly errorCode: string | undefined
}

export interface CallSpec {
  readonly key: string
  readonly stream: boolean
  readonly body: string
}

export const callSpec = (key: string, stream: boolean): CallSpec => ({
  key,
  stream,
  body: JSON.stringify({ model: "auto", stream, max_tokens: 64, messages: [{ role: "user", content: `crash harness call ${key}` }] })
})

/** One governed call; never throws: a connection cut by the crash is `status: "cut"`. */
export const governedCall = async (origin: string, apiKey: string, spec: CallSpec, onContent?: (chunks: number, firstAt: number) => void): Promise<Answer> => {
  const t0 = performance.now()
  let contentChunks = 0
  let firstContentAt: number | undefined
  let governance: Answer["governance"]
  let status: number | "cut" = "cut"
  let replayed = false
  let errorCode: string | undefined
  try {
    const res = await fetch(`${origin}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", "idempotency-key": spec.key },
      body: spec.body
    })
    replayed = res.headers.get("idempotent-replayed") === "true"
    if (!(res.headers.get("content-type") ?? "").includes("text/event-stream")) {
      const json = (await res.json()) as { governance?: Answer["governance"]; error?: { code?: string } }
      status = res.status
      governance = json.governance
      errorCode = json.error?.code
    } else {
      const reader = res.body!.getReader()
      const decoder = new TextDecoder()
      let buffer = ""
      for (;;) {
        const { done, value } = await reader.read()
        if (done) break
        buffer += decoder.decode(value, { stream: true })
        let at: number
        while ((at = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, at)
          buffer = buffer.slice(at + 2)
          const data = frame.split("\n").find((l) => l.startsWith("data: "))?.slice(6)
          if (data === undefined || data === "[DONE]") continue
          const json = JSON.parse(data) as { governance?: Answer["governance"]; choices?: Array<{ delta?: { content?: string } }>; error?: { code?: string } }
          if (json.governance !== undefined) governance = json.governance
          if (json.error !== undefined) errorCode = json.error.code
          if (json.choices?.some((c) => typeof c.delta?.content === "string" && c.delta.content.length > 0)) {
            contentChunks++
            firstContentAt ??= performance.now()
            onContent?.(contentChunks, firstContentAt)
          }
        }
      }
      status = res.status
    }
  } catch {
    status = "cut"
  }
  return { status, ms: performance.now() - t0, replayed, governance, contentChunks, firstContentAt, errorCode }
}

/** What the store says (read-only). */
export const storeState = (dbPath: string) => {
  const db = new Database(dbPath, { readonly: true })
  const one = <T>(sql: string, ...args: Array<unknown>) => db.prepare(sql).get(...args) as T
  try {
    return {
      reserved: one<{ n: number | null }>("SELECT SUM(reserved) AS n FROM budget_windows").n ?? 0,
      spent: one<{ n: number | null }>("SELECT SUM(spent) AS n FROM budget_windows").n ?? 0,
      held: one<{ n: number }>("SELECT COUNT(*) AS n FROM reservations WHERE state = 'held'").n,
      inFlightClaims: one<{ n: number }>("SELECT COUNT(*) AS n FROM idempotency WHERE state = 'in_flight'").n,
      pending: one<{ n: number }>("SELECT COUNT(*) AS n FROM requests WHERE status = 'pending'").n,
      /** Idempotency keys with more than one receipt: a double charge. */
      doubleCharged: db
        .prepare(
          `SELECT q.idempotency_key AS key, COUNT(*) AS n FROM receipts r JOIN requests q ON q.id = r.request_id
           WHERE q.idempotency_key IS NOT NULL GROUP BY q.idempotency_key HAVING COUNT(*) > 1`
        )
        .all() as Array<{ key: string; n: number }>,
      /** Every receipt by id, and by the idempotency key of its request. */
      receipts: db.prepare("SELECT r.id, r.credits_charged, r.output_tokens, q.idempotency_key AS key FROM receipts r JOIN requests q ON q.id = r.request_id").all() as Array<{
        id: string
        credits_charged: number
        output_tokens: number
        key: string | null
      }>
    }
  } finally {
    db.close()
  }
}

/** `tollgate audit` over the whole store (the same function the CLI runs). */
export const audit = (dbPath: string) => auditStore({ database: dbPath, limit: 20, jobs: 1 })

/** A seeded PRNG (mulberry32): the harness's runs are reproducible from TOLLGATE_CRASH_SEED. */
export const prng = (seed: number) => {
  let a = seed >>> 0
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return { next, int: (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1)) }
}
