/**
 * The facts a signature worker returns per receipt (spec/audit/facts.ts): a receipt is plain only
 * when its body parses, every column agrees with it and its seal is intact, and then its facts are the
 * signed body's own numbers and route; any other receipt is left to the main thread to parse. Rows
 * of a synthetic store, read through the audit port as the reader reads them.
 */
import { generateKeyPairSync, sign } from "node:crypto"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { beforeAll, describe, expect, it } from "vitest"
import { canonicalJson } from "../../spec/canonicalJson.ts"
import { type Receipt, unsignedPart } from "../../spec/receipt.ts"
import { batchFacts, Facts, FACTS_STRIDE, type ReceiptRow, packColumns, receiptKeyId, trustedKeyMap } from "../../spec/audit.ts"
import { auditQueries, nest } from "../../src/store/auditSource.ts"
import { openSqliteAudit } from "../../src/store/auditSqlite.ts"
import { buildSyntheticStore } from "./synthetic.ts"

let rows: Array<ReceiptRow>
let trusted: ReturnType<typeof trustedKeyMap>

beforeAll(async () => {
  const store = await buildSyntheticStore(join(mkdtempSync(join(tmpdir(), "tollgate-audit-facts-")), "synthetic.db"), { receipts: 40, projects: 2 })
  trusted = trustedKeyMap([{ id: receiptKeyId(store.publicKeyPem), pem: store.publicKeyPem, retiredAt: null }])
  const source = openSqliteAudit(store.path)
  rows = []
  const q = auditQueries({}).receipts
  for await (const batch of source.arrays(q.sql, q.params, 100)) rows.push(...batch.map(nest))
  await source.close()
})

describe("batchFacts", () => {
  it("a plain receipt's facts are its signed seq, reservation, tokens and route", () => {
    const facts = batchFacts(packColumns(rows), trusted)
    expect(rows.length).toBe(40)
    rows.forEach((row, i) => {
      const r = JSON.parse(row.body) as Receipt
      const at = i * FACTS_STRIDE
      expect([...facts.numbers.subarray(at, at + FACTS_STRIDE - 1)]).toEqual([
        Facts.plain, r.seq, r.credits_reserved, r.tokens.input, r.tokens.cached_input, r.tokens.output, r.tokens.reasoning
      ])
      expect(facts.routes[facts.numbers[at + 7]!]).toBe(r.route)
    })
  })

  it("a column that disagrees with the body, a body that is not a receipt, or a seal that is not intact: parsed by the main thread", () => {
    const r = JSON.parse(rows[0]!.body) as Receipt
    const forged = sign(null, Buffer.from(canonicalJson(unsignedPart(r)), "utf8"), generateKeyPairSync("ed25519").privateKey).toString("base64url")
    const cases: Array<ReceiptRow> = [
      { ...rows[0]!, credits_charged: rows[0]!.credits_charged + 1 },
      { ...rows[0]!, prev_hash: rows[1]!.hash },
      { ...rows[0]!, created_at: rows[0]!.created_at + 1 },
      { ...rows[0]!, body: "{" },
      { ...rows[0]!, body: JSON.stringify({ ...r, signature: forged }), signature: forged },
      { ...rows[0]!, body: JSON.stringify({ ...r, credits_reserved: r.credits_reserved + 1 }) }
    ]
    const facts = batchFacts(packColumns(cases), trusted)
    cases.forEach((_, i) => expect(facts.numbers[i * FACTS_STRIDE]).toBe(Facts.parseHere))
  })
})
