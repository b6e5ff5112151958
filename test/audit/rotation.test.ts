/**
 * Receipt key rotation: restart the gateway on the same store with TOLLGATE_RECEIPT_KEY_FILE naming a
 * new key. The old public key stays published (retired), old and new receipts all verify, and the
 * audit of the mixed store is clean.
 */
import { HttpServer } from "@effect/platform"
import Database from "better-sqlite3"
import { Effect, Layer, ManagedRuntime, Option, Redacted } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { verifyReceiptWith } from "../../src/cli/verifyReceipt.ts"
import { makeSettings, Settings } from "../../src/domain/config.ts"
import { ServerLive } from "../../src/server.ts"
import { Bootstrap } from "../../src/services/Bootstrap.ts"
import { ADMIN_TOKEN, mockGatewayFile } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { audit, named } from "./fixture.ts"

const dir = mkdtempSync(join(tmpdir(), "tollgate-rotation-"))
const dbPath = join(dir, "tollgate.db")
let upstream: MockUpstream

/** Start the gateway on `dbPath` signing with `keyFile`; returns its origin, a usable API key and a stop function. */
const start = async (keyFile: string | undefined) => {
  const settings = makeSettings({
    databaseUrl: `sqlite:${dbPath}`,
    adminToken: Option.some(Redacted.make(ADMIN_TOKEN)),
    gateway: mockGatewayFile(upstream.url),
    receiptKeyFile: keyFile === undefined ? Option.none() : Option.some(keyFile)
  })
  const runtime = ManagedRuntime.make(ServerLive.pipe(Layer.provide(Layer.succeed(Settings, settings))))
  const { port, first } = await runtime.runPromise(
    Effect.gen(function* () {
      const server = yield* HttpServer.HttpServer
      const bootstrap = yield* Bootstrap
      return { port: server.address._tag === "TcpAddress" ? server.address.port : 0, first: bootstrap.firstStart }
    })
  )
  const origin = `http://127.0.0.1:${port}`
  const admin = (method: string, path: string, body?: unknown) =>
    fetch(`${origin}${path}`, { method, headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" }, body: JSON.stringify(body) }).then(
      (r) => r.json() as Promise<any>
    )
  let key = first?.developmentKey
  if (key === undefined) {
    const db = new Database(dbPath, { readonly: true })
    const project = (db.prepare(`SELECT id FROM projects LIMIT 1`).get() as { id: string }).id
    db.close()
    key = (await admin("POST", `/admin/v1/projects/${project}/keys`, { environment: "development" })).secret as string
  }
  const call = async (content: string) => {
    const res = await fetch(`${origin}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "auto", messages: [{ role: "user", content }] })
    })
    expect(res.status).toBe(200)
    const requestId = res.headers.get("x-request-id")!
    return (await fetch(`${origin}/v1/requests/${requestId}/receipt`, { headers: { authorization: `Bearer ${key}` } })).text()
  }
  return { origin, call, stop: () => runtime.dispose() }
}

let oldReceipt: string
let newReceipt: string
let published: ReadonlyArray<{ id: string; public_key: string; retired_at: string | null }>

beforeAll(async () => {
  upstream = await startMockUpstream()
  const first = await start(undefined) // the key generated beside the store on first start
  oldReceipt = await first.call("signed by the first key")
  await first.call("also by the first key")
  await first.stop()
  const second = await start(join(dir, "rotated-key.pem"))
  newReceipt = await second.call("signed by the rotated key")
  published = ((await (await fetch(`${second.origin}/v1/receipts/keys`)).json()) as { data: typeof published }).data
  await second.stop()
})
afterAll(async () => {
  await upstream?.close()
  rmSync(dir, { recursive: true, force: true })
})

describe("receipt key rotation", () => {
  it("keeps the old public key, retired, beside the new one", async () => {
    expect(published).toHaveLength(2)
    const [old, current] = published
    expect(old!.retired_at).not.toBeNull()
    expect(current!.retired_at).toBeNull()
    expect(JSON.parse(oldReceipt).signing_key_id).toBe(old!.id)
    expect(JSON.parse(newReceipt).signing_key_id).toBe(current!.id)
  })

  it("old and new receipts both verify against the published keys", async () => {
    expect(verifyReceiptWith(oldReceipt, published).valid).toBe(true)
    expect(verifyReceiptWith(newReceipt, published).valid).toBe(true)
  })

  it("the audit of the store spanning the rotation is clean", async () => {
    const r = await audit(dbPath)
    expect(named(r)).toEqual([])
    expect(r.summary.stats).toMatchObject({ receipts: 3, keys: 2 })
  })

  it("a receipt dated after its key's retirement is named", async () => {
    const copy = join(dir, "retired-early.db")
    const db = new Database(dbPath, { readonly: true })
    db.exec(`VACUUM INTO '${copy}'`)
    db.close()
    const w = new Database(copy)
    w.prepare(`UPDATE receipt_keys SET retired_at = 0 WHERE retired_at IS NOT NULL`).run()
    const early = w.prepare(`SELECT id FROM receipts WHERE signing_key_id = (SELECT id FROM receipt_keys WHERE retired_at = 0) ORDER BY seq`).all() as Array<{ id: string }>
    w.close()
    expect(named(await audit(copy))).toEqual(early.map((r) => `signing_key_retired ${r.id}`).sort())
  })
})
