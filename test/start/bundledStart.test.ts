/**
 * `npm start` runs the bundle that scripts/build.mjs makes of src/main.ts and the store worker
 * (docs/architecture.md, "How npm start runs"). This builds it as `prestart` does, starts it as a user
 * would, and makes a governed call with the official SDK: the bundled server and its bundled store
 * worker must serve the same contract as the TypeScript sources the rest of the suite runs. It also
 * keeps what made the bundle small from creeping back (docs/decisions/0016-memory.md).
 */
import Database from "better-sqlite3"
import { type ChildProcess, spawn, spawnSync } from "node:child_process"
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { join } from "node:path"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"

const root = join(import.meta.dirname, "../..")

describe("npm start: the bundled server", () => {
  // Inside the checkout (.tollgate/ is ignored), so the bundle resolves better-sqlite3, a native
  // addon it leaves out, from the project's node_modules as dist/ does.
  mkdirSync(join(root, ".tollgate"), { recursive: true })
  const dir = mkdtempSync(join(root, ".tollgate", "start-"))
  let child: ChildProcess
  let baseURL: string
  let key: string

  beforeAll(async () => {
    const build = spawnSync(process.execPath, [join(root, "scripts/build.mjs"), join(root, "src/main.ts"), join(dir, "dist")], { encoding: "utf8" })
    expect(build.status, build.stderr).toBe(0)
    // The demo provider and a fresh store, as on a user's first start.
    const { TOLLGATE_CONFIG: _config, TOLLGATE_ADMIN_TOKEN: _admin, ...env } = process.env
    // With the Node flags `npm start` passes (package.json's start script: V8's heap sizing).
    const start = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { scripts: { start: string } }).scripts.start
    child = spawn(process.execPath, [...start.split(" ").filter((w) => w.startsWith("--")), join(dir, "dist/main.mjs")], {
      env: { ...env, PORT: "0", HOST: "127.0.0.1", DATABASE_URL: `sqlite:${join(dir, "t.db")}` },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let out = ""
    child.stderr!.on("data", (chunk: Buffer) => (out += chunk.toString()))
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no banner within 30 s: ${out}`)), 30_000)
      child.stdout!.on("data", (chunk: Buffer) => {
        out += chunk.toString()
        const url = /OpenAI base URL: (\S+)\)/.exec(out)
        const dev = /development key: (\S+)/.exec(out)
        if (url && dev) {
          clearTimeout(timer)
          baseURL = url[1]!
          key = dev[1]!
          resolve()
        }
      })
      child.on("exit", (code) => reject(new Error(`exited ${code}: ${out}`)))
    })
  }, 60_000)

  afterAll(async () => {
    if (child.exitCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve))
      child.kill("SIGTERM")
      await exited
    }
    rmSync(dir, { recursive: true, force: true })
  })

  it("the store worker's bundle holds no package (no effect, no tokenizer): its thread loads only Tollgate's own statements", () => {
    const map = JSON.parse(readFileSync(join(dir, "dist/storeWorker.mjs.map"), "utf8")) as { sources: Array<string> }
    expect(map.sources.some((s) => s.endsWith("src/store/storeWorker.ts"))).toBe(true)
    expect(map.sources.filter((s) => s.includes("node_modules"))).toEqual([])
  })

  it("the tokenizer's ranks are read from JSON beside the bundle, the very array gpt-tokenizer ships, not parsed as code", async () => {
    const { default: ranks } = (await import("gpt-tokenizer/bpeRanks/o200k_base")) as { default: Array<string | Array<number>> }
    expect(JSON.parse(readFileSync(join(dir, "dist/o200k_base.json"), "utf8"))).toEqual(ranks)
    // A rank from the end of the table, as the array literal would spell it in the bundle.
    const main = readFileSync(join(dir, "dist/main.mjs"), "utf8")
    expect(main).not.toContain(JSON.stringify(ranks.at(-1)))
    expect(main).toContain("o200k_base.json")
  })

  it("serves a governed call and a stream through its bundled store worker, each settled with a receipt", async () => {
    const client = new OpenAI({ baseURL, apiKey: key, maxRetries: 0 })
    const completion = (await client.chat.completions.create({
      model: "auto",
      messages: [{ role: "user", content: "Hello from the bundle" }],
      metadata: { idempotency_key: "bundled-start-1" }
    })) as OpenAI.ChatCompletion & { governance: { status: string; receipt_id: string; credits_charged: number } }
    expect(completion.governance.status).toBe("completed")
    expect(completion.governance.credits_charged).toBeGreaterThan(0)

    const stream = await client.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "Stream it" }], stream: true })
    let governance: { status: string; receipt_id: string } | undefined
    for await (const chunk of stream) governance = (chunk as { governance?: typeof governance }).governance ?? governance
    expect(governance?.status).toBe("completed")

    // The bundled server finds the dashboard's build (dashboard/dist, made by `npm ci` / prestart).
    const dashboard = await fetch(new URL("/dashboard/", baseURL))
    expect(dashboard.status).toBe(200)
    expect(dashboard.headers.get("content-security-policy")).toContain("script-src 'self'")

    const db = new Database(join(dir, "t.db"), { readonly: true })
    try {
      const ids = (db.prepare("SELECT id FROM receipts").all() as Array<{ id: string }>).map((r) => r.id).sort()
      expect(ids).toEqual([completion.governance.receipt_id, governance!.receipt_id].sort())
    } finally {
      db.close()
    }
  }, 60_000)
})
