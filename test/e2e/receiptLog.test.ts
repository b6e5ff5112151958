/**
 * Issue 43 through a real gateway (SQLite here; PostgreSQL + Redis in the e2e-pg project), the calls
 * made by the official openai client: the Merkle log as served — every receipt's inclusion proof from
 * GET /v1/requests/{id}/receipt/proof verifies against every later checkpoint, every pair of
 * checkpoints is consistent by GET /v1/receipts/consistency, a checkpoint opens with the receipt key
 * of GET /v1/receipts/keys — the export's cursor walk, and the clear 400/404s.
 */
import { Effect, Layer, Option } from "effect"
import { dirname, join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { openCheckpoint, noteVerifier, originOf, type Checkpoint } from "../../spec/checkpoint.ts"
import { rawOfSpkiPem } from "../../spec/ed25519.ts"
import { readExport } from "../../spec/export.ts"
import { receiptLeafHash, treeHead, verifyConsistency, verifyInclusion } from "../../spec/merkle.ts"
import type { Receipt } from "../../spec/receipt.ts"
import { Pricing } from "../../src/services/Pricing.ts"
import { ReceiptLog } from "../../src/services/ReceiptLog.ts"
import { ReceiptSigner } from "../../src/services/ReceiptSigner.ts"
import { StoreDatabaseLive } from "../../src/store/Database.ts"
import { useMockedGateway } from "../support/gateway.ts"
import { testRuntime } from "../support/runtime.ts"
import { clientFor, expectWireError, newProject, raw } from "./helpers.ts"

// The background round every 100 ms, so the test waits for checkpoints by polling, never by time.
process.env.TOLLGATE_CHECKPOINT_INTERVAL_MS = "100"
const t = useMockedGateway({ beforeAll, afterAll })

const b64 = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, "base64"))

const getJson = async (path: string, key: string): Promise<any> => {
  const res = await raw(t.gateway, path, { key })
  expect(res.status, `${path}: ${res.status}`).toBe(200)
  return res.json()
}

/** The latest checkpoint once the log holds `size` receipts (polled: the background round signs it). */
const checkpointOfSize = async (key: string, size: number): Promise<string> => {
  for (let i = 0; i < 600; i++) {
    const res = await raw(t.gateway, "/v1/receipts/checkpoint", { key })
    if (res.status === 200) {
      const text = await res.text()
      if (text.split("\n")[1] === String(size)) return text
    } else await res.text()
    await new Promise((r) => setTimeout(r, 50))
  }
  throw new Error(`no checkpoint of size ${size}`)
}

describe("the receipt log as served", () => {
  it("inclusion of every receipt in every later checkpoint, consistency of every pair, the export's walk", async () => {
    const gw = t.gateway
    const { projectId, key } = await newProject(gw, { name: "log" })
    const client = clientFor(gw, key)
    const keys = (await getJson("/v1/receipts/keys", key)).data as Array<{ id: string; public_key: string }>
    const verifiers = keys.map((k) => noteVerifier(k.id, rawOfSpkiPem(k.public_key)!))

    const notes: Array<string> = []
    let made = 0
    for (const upTo of [1, 5, 16, 17, 33, 40]) {
      while (made < upTo) {
        await client.chat.completions.create({ model: "gpt-test", messages: [{ role: "user", content: `call ${made}` }], max_tokens: 8 })
        made++
      }
      notes.push(await checkpointOfSize(key, made))
    }
    const checkpoints: Array<Checkpoint> = notes.map((n) => {
      const opened = openCheckpoint(n, verifiers, originOf(projectId))
      if (opened._tag !== "Opened") throw new Error(`checkpoint refused: ${opened.reason} ${opened.detail}`)
      expect(opened.checkpoint.extensions[0]).toMatch(/^time \d{4}-\d\d-\d\dT/)
      return opened.checkpoint
    })
    if (gw.engine === "sqlite") console.log(`a checkpoint as served (GET /v1/receipts/checkpoint):\n${notes[4]}`)
    // a stored checkpoint of a size is served by size
    expect(await (await raw(gw, `/v1/receipts/checkpoint?tree_size=${checkpoints[2]!.treeSize}`, { key })).text()).toBe(notes[2])

    // the export, one page: the chain in order, the same receipts GET /v1/requests/{id}/receipt serves
    const full = await raw(gw, "/v1/receipts?limit=1000", { key })
    expect(full.headers.get("content-type")).toMatch(/^application\/jsonl/)
    expect(full.headers.get("x-next-cursor")).toBeNull()
    const records = readExport(await full.text())
    expect(records.filter((r) => r.kind === "malformed")).toEqual([])
    const receipts = records.flatMap((r) => (r.kind === "receipt" ? [r.receipt] : []))
    expect(receipts.map((r) => r.seq)).toEqual(Array.from({ length: 40 }, (_, i) => i + 1))
    const header = records[0]!
    expect(header.kind === "header" && header.header.keys.map((k) => k.id)).toEqual(keys.map((k) => k.id))
    expect(await getJson(`/v1/requests/${receipts[7]!.request_id}/receipt`, key)).toEqual(receipts[7])

    // every receipt, every checkpoint that holds it: the served proof takes its leaf to the signed root
    let proofs = 0
    for (const r of receipts) {
      for (const cp of checkpoints) {
        if (cp.treeSize < r.seq) continue
        const p = await getJson(`/v1/requests/${r.request_id}/receipt/proof?tree_size=${cp.treeSize}`, key)
        expect(p).toMatchObject({ object: "inclusion_proof", leaf_index: r.seq - 1, tree_size: cp.treeSize })
        expect(verifyInclusion(r.seq - 1, cp.treeSize, receiptLeafHash(r.hash), p.hashes.map(b64), cp.rootHash), `seq ${r.seq} in ${cp.treeSize}`).toBe(true)
        // the same proof does not take another receipt's leaf there
        const other = receipts[r.seq % receipts.length]!
        if (other.seq !== r.seq) expect(verifyInclusion(r.seq - 1, cp.treeSize, receiptLeafHash(other.hash), p.hashes.map(b64), cp.rootHash)).toBe(false)
        if (gw.engine === "sqlite" && r.seq === 20 && cp.treeSize === 33) console.log(`an inclusion proof as served (GET /v1/requests/${r.request_id}/receipt/proof?tree_size=33):\n${JSON.stringify(p)}`)
        proofs++
      }
    }
    expect(proofs).toBe(checkpoints.reduce((n, cp) => n + cp.treeSize, 0))
    // every pair of checkpoints (m ≤ n): the served consistency proof links the two signed roots
    for (const a of checkpoints) {
      for (const b of checkpoints) {
        if (a.treeSize > b.treeSize) continue
        const c = await getJson(`/v1/receipts/consistency?from=${a.treeSize}&to=${b.treeSize}`, key)
        expect(verifyConsistency(a.treeSize, b.treeSize, c.hashes.map(b64), a.rootHash, b.rootHash), `${a.treeSize} → ${b.treeSize}`).toBe(true)
      }
    }

    // the cursor walk (3 at a time) is the one full read
    const walked: Array<Receipt> = []
    let cursor: string | null = null
    let pages = 0
    do {
      const res: Response = await raw(gw, `/v1/receipts?limit=3${cursor === null ? "" : `&cursor=${cursor}`}`, { key })
      expect(res.status).toBe(200)
      cursor = res.headers.get("x-next-cursor")
      for (const r of readExport(await res.text())) if (r.kind === "receipt") walked.push(r.receipt)
      pages++
    } while (cursor !== null)
    expect(pages).toBe(14)
    expect(walked).toEqual(receipts)
    // the same under the admin API, and by period (all of them are this month's)
    const admin = await fetch(`${gw.origin}/admin/v1/projects/${projectId}/receipts?period=${receipts[0]!.period}`, { headers: { authorization: `Bearer ${gw.adminToken}` } })
    expect(admin.status).toBe(200)
    expect(readExport(await admin.text()).flatMap((r) => (r.kind === "receipt" ? [r.receipt] : []))).toEqual(receipts)

    // clear refusals
    const req = receipts[0]!.request_id
    await expectWireError(await raw(gw, `/v1/requests/${req}/receipt/proof?tree_size=4000`, { key }), { status: 400, code: "invalid_request_error", param: "tree_size", message: /beyond the log/ })
    await expectWireError(await raw(gw, `/v1/requests/${req}/receipt/proof?tree_size=abc`, { key }), { status: 400, code: "invalid_request_error", param: "tree_size" })
    await expectWireError(await raw(gw, `/v1/requests/${req}/receipt/proof`, { key }), { status: 400, code: "invalid_request_error", param: "tree_size" })
    await expectWireError(await raw(gw, `/v1/requests/${receipts[20]!.request_id}/receipt/proof?tree_size=5`, { key }), { status: 400, code: "invalid_request_error", param: "tree_size" })
    await expectWireError(await raw(gw, `/v1/requests/req_nope/receipt/proof?tree_size=5`, { key }), { status: 404, code: "request_not_found" })
    await expectWireError(await raw(gw, `/v1/receipts/checkpoint?tree_size=41`, { key }), { status: 404, code: "not_found" })
    await expectWireError(await raw(gw, `/v1/receipts/consistency?from=5&to=1`, { key }), { status: 400, code: "invalid_request_error", param: "from" })
    await expectWireError(await raw(gw, `/v1/receipts/consistency?from=1&to=99999`, { key }), { status: 400, code: "invalid_request_error", param: "to" })
    await expectWireError(await raw(gw, `/v1/receipts?limit=0`, { key }), { status: 400, code: "invalid_request_error", param: "limit" })
    await expectWireError(await raw(gw, `/v1/receipts?cursor=zz`, { key }), { status: 400, code: "invalid_request_error", param: "cursor" })
    await expectWireError(await raw(gw, `/v1/receipts?period=2026-13`, { key }), { status: 400, code: "invalid_request_error", param: "period" })
    // the month is open: no statement yet
    await expectWireError(await raw(gw, `/v1/statements/${receipts[0]!.period}`, { key }), { status: 404, code: "not_found", message: /not closed/ })
    await expectWireError(await raw(gw, `/v1/statements/May`, { key }), { status: 400, code: "invalid_request_error", param: "period" })
    // another project's key sees none of it
    const other = await newProject(gw, { name: "other" })
    await expectWireError(await raw(gw, `/v1/requests/${req}/receipt/proof?tree_size=5`, { key: other.key }), { status: 404, code: "request_not_found" })
    await expectWireError(await raw(gw, `/v1/receipts/checkpoint`, { key: other.key }), { status: 404, code: "not_found" })
  }, 120_000)

  it("instances racing on one log, each often behind the others: every complete subtree stored once with the rulebook's hash, every root the tree head", async () => {
    const gw = t.gateway
    const { projectId, key } = await newProject(gw, { name: "race" })
    const client = clientFor(gw, key)
    // two more instances on the store (their own background rounds off) beside the gateway's own, every 100 ms
    const layer = ReceiptLog.Default.pipe(Layer.provideMerge(Layer.merge(ReceiptSigner.Default, Pricing.Default)), Layer.provideMerge(StoreDatabaseLive))
    const before = process.env.TOLLGATE_CHECKPOINT_INTERVAL_MS
    process.env.TOLLGATE_CHECKPOINT_INTERVAL_MS = "0"
    const [a, b] = [0, 1].map(() => testRuntime(layer, { databaseUrl: gw.databaseUrl, receiptKeyFile: Option.some(join(dirname(gw.dbPath), "receipt-signing-key.pem")) }))
    const extend = (rt: typeof a, size: number) => rt!.runPromise(Effect.flatMap(ReceiptLog, (log) => log.extend(projectId, size)))
    try {
      await Promise.all([a!.runPromise(ReceiptLog), b!.runPromise(ReceiptLog)])
      process.env.TOLLGATE_CHECKPOINT_INTERVAL_MS = before
      const N = 70
      for (let made = 1; made <= N; made++) {
        await client.chat.completions.create({ model: "gpt-test", messages: [{ role: "user", content: `race ${made}` }], max_tokens: 8 })
        // a at some sizes, b at others, both at once at others: each finds the log grown by the others
        if (made % 3 === 0) await extend(a, made)
        if (made % 5 === 0) await extend(b, made)
        if (made % 7 === 0) await Promise.all([extend(a, made), extend(b, made)])
      }
      const [sa, sb] = await Promise.all([extend(a, N), extend(b, N)])
      expect(sa).toBe(N)
      expect(sb).toBe(N)
      const hashes = gw.query<{ hash: string }>("SELECT hash FROM receipts WHERE project_id = ? ORDER BY seq", projectId).map((r) => receiptLeafHash(r.hash))
      expect(hashes).toHaveLength(N)
      const want: Array<[number, string]> = []
      for (let level = 4; 2 ** level <= N; level++) {
        for (let i = 0; (i + 1) * 2 ** level <= N; i++) want.push([i * 64 + level, Buffer.from(treeHead(hashes.slice(i * 2 ** level, (i + 1) * 2 ** level))).toString("hex")])
      }
      const stored = gw.query<{ node: number; hash: string }>("SELECT node, hash FROM receipt_log_nodes WHERE project_id = ? ORDER BY node", projectId).map((r) => [Number(r.node), r.hash])
      expect(stored).toEqual(want.sort((x, y) => x[0] - y[0]))
      // each instance's root of every size (its kept frontier's, or read from the store) is the tree head
      for (const size of [N, 64, 37, 16, 1]) {
        for (const rt of [a, b]) {
          const cp = await rt!.runPromise(Effect.flatMap(ReceiptLog, (log) => log.checkpointOf(projectId, size)))
          expect(cp.root, `size ${size}`).toBe(Buffer.from(treeHead(hashes, size)).toString("base64"))
        }
      }
    } finally {
      process.env.TOLLGATE_CHECKPOINT_INTERVAL_MS = before
      await Promise.all([a!.dispose(), b!.dispose()])
    }
  }, 120_000)
})
