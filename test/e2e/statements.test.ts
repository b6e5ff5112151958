/**
 * Issue 43, monthly statements: 404 while the month is open (the gateway's own clock), then — on
 * Effect's TestClock moved past the month's end and its grace — a signed statement whose totals equal
 * the sums of the month's receipts (the export's), whose checkpoint holds every one of them, and which
 * two instances making it at once agree on (the first stored is the one both serve). SQLite here,
 * PostgreSQL in the e2e-pg project; the receipts come from real calls by the openai client. Then
 * `tollgate audit`'s statements pass: clean, and a stored statement edited (spent + 1) is named.
 */
import { Effect, Layer, TestClock, TestContext } from "effect"
import { createPublicKey, verify } from "node:crypto"
import { dirname, join } from "node:path"
import { Option } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { noteVerifier, openCheckpoint, originOf } from "../../spec/checkpoint.ts"
import { rawOfSpkiPem } from "../../spec/ed25519.ts"
import { readExport } from "../../spec/export.ts"
import { periodBounds } from "../../spec/ledger.ts"
import type { Receipt } from "../../spec/receipt.ts"
import { type Statement, statementFromReceipts, statementSignedBytes, totalsDifferences } from "../../spec/statement.ts"
import { Pricing } from "../../src/services/Pricing.ts"
import { CLOSE_GRACE_MS, ReceiptLog } from "../../src/services/ReceiptLog.ts"
import { ReceiptSigner } from "../../src/services/ReceiptSigner.ts"
import { StoreDatabaseLive } from "../../src/store/Database.ts"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { testRuntime } from "../support/runtime.ts"
import Database from "better-sqlite3"
import pg from "pg"
import { openAuditSource } from "../../src/store/auditReader.ts"
import { auditStatements } from "../../src/store/statementsAudit.ts"
import { clientFor, expectWireError, newProject, raw } from "./helpers.ts"

let upstream: MockUpstream
let gw: TestGateway
beforeAll(async () => {
  upstream = await startMockUpstream()
  gw = await startGateway(
    mockGatewayFile(upstream.url, [
      { name: "gpt-test", provider: "mock", upstream_model: "mock-model", max_output_tokens: 256, auto: true },
      { name: "gpt-other", provider: "mock", upstream_model: "mock-model", max_output_tokens: 256, auto: false }
    ])
  )
})
afterAll(async () => {
  await gw?.close()
  await upstream?.close()
})

/** A ReceiptLog over the gateway's store (its receipt key, or a key file of its own), the background round off. */
const instance = (keyFile = "receipt-signing-key.pem") => {
  process.env.TOLLGATE_CHECKPOINT_INTERVAL_MS = "0"
  const layer = ReceiptLog.Default.pipe(Layer.provideMerge(Layer.merge(ReceiptSigner.Default, Pricing.Default)), Layer.provideMerge(StoreDatabaseLive))
  return testRuntime(layer, { databaseUrl: gw.databaseUrl, receiptKeyFile: Option.some(join(dirname(gw.dbPath), keyFile)) })
}

describe("monthly statements", () => {
  it("404 while the period is open; after its close one signed statement, equal to the sums of its receipts, the same from two instances", async () => {
    const { projectId, key } = await newProject(gw, { name: "statement", budget: 5_000_000 })
    const client = clientFor(gw, key)
    for (let i = 0; i < 7; i++) {
      await client.chat.completions.create({ model: i % 3 === 0 ? "gpt-other" : "gpt-test", messages: [{ role: "user", content: `statement call ${i}` }], max_tokens: 5 + i })
    }
    const exported = readExport(await (await raw(gw, "/v1/receipts", { key })).text())
    const receipts = exported.flatMap((r) => (r.kind === "receipt" ? [r.receipt] : [])) as Array<Receipt>
    expect(receipts).toHaveLength(7)
    const period = receipts[0]!.period
    await expectWireError(await raw(gw, `/v1/statements/${period}`, { key }), { status: 404, code: "not_found", message: /not closed/ })
    // A month long closed but ended before the project existed: no statement is signed for it.
    await expectWireError(await raw(gw, "/v1/statements/2020-01", { key }), { status: 404, code: "not_found", message: /did not exist in 2020-01/ })
    const keys = ((await (await raw(gw, "/v1/receipts/keys")).json()) as { data: Array<{ id: string; public_key: string }> }).data
    await gw.shutdown()

    // two instances on the store, on a TestClock: just before the close (still 404 in effect), then after it
    const a = instance()
    const b = instance()
    const closeAt = periodBounds(period).endMillis + CLOSE_GRACE_MS
    const atTime = <A, E>(t: number, eff: Effect.Effect<A, E, ReceiptLog>) =>
      Effect.gen(function* () {
        yield* TestClock.setTime(t)
        return yield* eff
      }).pipe(Effect.provide(TestContext.TestContext))
    try {
      const early = await a.runPromise(atTime(closeAt - 1, Effect.flatMap(ReceiptLog, (log) => log.statementOf(projectId, period))))
      expect(early).toBeUndefined()
      const [sa, sb] = await Promise.all([
        a.runPromise(atTime(closeAt, Effect.flatMap(ReceiptLog, (log) => log.statementOf(projectId, period)))),
        b.runPromise(atTime(closeAt + 5, Effect.flatMap(ReceiptLog, (log) => log.statementOf(projectId, period))))
      ])
      expect(sa).toBeDefined()
      expect(sb).toEqual(sa)
      const s = sa as Statement
      if (gw.engine === "sqlite") console.log(`a statement as served (GET /v1/statements/${period}):\n${JSON.stringify(s, null, 1)}`)
      // the totals are the receipts' sums, figure by figure
      expect(totalsDifferences(s, statementFromReceipts(receipts))).toEqual([])
      expect(s.receipt_count).toBe(7)
      expect(Object.keys(s.by_model).sort()).toEqual(["gpt-other", "gpt-test"])
      expect(s.spent).toBe(receipts.reduce((n, r) => n + r.credits_charged, 0))
      expect(s.cap).toBe(5_000_000)
      expect(s.closed_at).toBe(new Date(closeAt).toISOString())
      // signed by a published receipt key, over the documented bytes
      const k = keys.find((x) => x.id === s.signing_key_id)!
      expect(verify(null, statementSignedBytes(s), createPublicKey(k.public_key), Buffer.from(s.signature, "base64url"))).toBe(true)
      expect(verify(null, statementSignedBytes({ ...s, spent: s.spent + 1 }), createPublicKey(k.public_key), Buffer.from(s.signature, "base64url"))).toBe(false)
      // its checkpoint is the log at the close: it holds every receipt of the period
      const opened = openCheckpoint(s.checkpoint, keys.map((x) => noteVerifier(x.id, rawOfSpkiPem(x.public_key)!)), originOf(projectId))
      expect(opened._tag).toBe("Opened")
      if (opened._tag === "Opened") expect(opened.checkpoint.treeSize).toBeGreaterThanOrEqual(Math.max(...receipts.map((r) => r.seq)))
      // immutable: asked again later, the stored one
      const later = await b.runPromise(atTime(closeAt + 86_400_000, Effect.flatMap(ReceiptLog, (log) => log.statementOf(projectId, period))))
      expect(later).toEqual(s)
      const rows = gw.query<{ n: number }>("SELECT COUNT(*) AS n FROM statements WHERE project_id = ?", projectId)
      expect(Number(rows[0]!.n)).toBe(1)

      // tollgate audit's pass: clean, then a stored statement with spent off by one is named (and its signature no longer verifies)
      const audit = async () => {
        const { source } = await openAuditSource(gw.databaseUrl)
        try {
          return await auditStatements(source, { project: projectId })
        } finally {
          await source.close()
        }
      }
      expect(await audit()).toEqual({ checked: 1, findings: [] })
      const edited = JSON.stringify({ ...s, spent: s.spent + 1 })
      if (gw.engine === "sqlite") {
        const db = new Database(gw.dbPath)
        db.prepare("UPDATE statements SET body = ? WHERE project_id = ?").run(edited, projectId)
        db.close()
      } else {
        const client = new pg.Client({ connectionString: gw.databaseUrl })
        await client.connect()
        await client.query("UPDATE statements SET body = $1 WHERE project_id = $2", [edited, projectId])
        await client.end()
      }
      const found = await audit()
      expect(found.findings.map((f) => [f.kind, f.subject])).toEqual([
        ["statement_signature_invalid", `${projectId}/${period}`],
        ["statement_totals_mismatch", `${projectId}/${period}`]
      ])
      expect(found.findings[1]!.message).toMatch(/spent is \d+; the period's receipts sum to \d+/)

      // two instances with keys of their own sign the checkpoint of one size at once: one is stored, both serve it
      const c = instance("other-instance-key.pem")
      try {
        const [na, nc] = await Promise.all([
          a.runPromise(Effect.flatMap(ReceiptLog, (log) => log.checkpointOf(projectId, 3))),
          c.runPromise(Effect.flatMap(ReceiptLog, (log) => log.checkpointOf(projectId, 3)))
        ])
        expect(nc).toEqual(na)
        expect(Number(gw.query<{ n: number }>("SELECT COUNT(*) AS n FROM receipt_checkpoints WHERE project_id = ? AND tree_size = 3", projectId)[0]!.n)).toBe(1)
      } finally {
        await c.dispose()
      }
    } finally {
      await a.dispose()
      await b.dispose()
    }
  }, 120_000)
})
