/**
 * spec/export.ts: the export's JSON Lines read back as written, pages concatenated, and each kind of
 * malformed line named with its line number.
 */
import { generateKeyPairSync } from "node:crypto"
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { type ExportKey, headerLine, LineSplitter, readExport } from "../../spec/export.ts"
import { GENESIS_HASH, sealReceipt, type Receipt } from "../../spec/receipt.ts"

const { privateKey, publicKey } = generateKeyPairSync("ed25519")
const key: ExportKey = {
  id: "rk_0123456789abcdef",
  algorithm: "Ed25519",
  public_key: publicKey.export({ type: "spki", format: "pem" }) as string,
  created_at: "2026-11-01T00:00:00.000Z",
  retired_at: null
}

const chain = (n: number, project = "prj_a"): Array<Receipt> => {
  const out: Array<Receipt> = []
  let prev = GENESIS_HASH
  for (let seq = 1; seq <= n; seq++) {
    const r = sealReceipt(privateKey, {
      object: "receipt", receipt_id: `rcpt_${seq}`, request_id: `req_${seq}`, organization: "org", project_id: project,
      environment: "development", status: "completed", verification: { state: "verified", checks: ["route"], failed_checks: [] },
      model: "m", route: "m", rate_card_version: "rc_2026-11", tokens: { input: seq, cached_input: 0, output: 1, reasoning: 0 },
      usage_source: "reported", credits_reserved: 10, credits_charged: 1, period: "2026-11", seq,
      created_at: "2026-11-02T00:00:00.000Z", prev_hash: prev, signing_key_id: key.id
    }).receipt
    prev = r.hash
    out.push(r)
  }
  return out
}

const page = (receipts: ReadonlyArray<Receipt>, cursor: string | null, next: string | null): string =>
  [headerLine({ project_id: "prj_a", period: "2026-11", cursor, next_cursor: next, keys: [key] }), ...receipts.map((r) => JSON.stringify(r))].map((l) => `${l}\n`).join("")

describe("spec/export.ts", () => {
  it("round trip: pages of any split, concatenated, read back as their headers and the receipts in order", () => {
    const all = chain(12)
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 12 }), { maxLength: 4 }), fc.integer({ min: 1, max: 50 }), (cuts, chunk) => {
        const bounds = [0, ...[...new Set(cuts)].sort((a, b) => a - b), 12]
        const text = bounds.slice(1).map((end, i) => page(all.slice(bounds[i]!, end), i === 0 ? null : String(bounds[i]! + 1), end === 12 ? null : String(end + 1))).join("")
        // read in chunks of `chunk` characters, as a stream would
        const splitter = new LineSplitter()
        const lines: Array<string> = []
        for (let i = 0; i < text.length; i += chunk) lines.push(...splitter.push(text.slice(i, i + chunk)))
        lines.push(...splitter.end())
        const records = readExport(lines.map((l) => `${l}\n`).join(""))
        expect(records.filter((r) => r.kind === "malformed")).toEqual([])
        expect(records.filter((r) => r.kind === "header").length).toBe(bounds.length - 1)
        expect(records.flatMap((r) => (r.kind === "receipt" ? [r.receipt] : []))).toEqual(all)
      })
    )
  })

  it("names each malformed line with its number and reason", () => {
    const [r1] = chain(1)
    const other = chain(1, "prj_b")[0]!
    const head = headerLine({ project_id: "prj_a", period: null, cursor: null, next_cursor: null, keys: [key] })
    const cases: Array<[string, RegExp]> = [
      ["{not json", /not JSON/],
      ["[1,2]", /not a JSON object/],
      ["", /empty line/],
      [JSON.stringify({ ...r1, seq: 0 }), /seq/],
      [JSON.stringify({ ...r1, hash: "XYZ" }), /hash/],
      [JSON.stringify({ ...r1, tokens: { ...r1!.tokens, output: -1 } }), /tokens\.output/],
      [JSON.stringify(other), /project prj_b/],
      [headerLine({ project_id: "prj_b", period: null, cursor: null, next_cursor: null, keys: [] }), /page of project prj_b/],
      [JSON.stringify({ object: "receipt_export", version: 2, project_id: "prj_a", period: null, cursor: null, next_cursor: null, keys: [] }), /version 2/],
      [JSON.stringify({ object: "statement" }), /neither a header nor a receipt/]
    ]
    for (const [line, why] of cases) {
      const records = readExport(`${head}\n${line}\n${JSON.stringify(r1)}\n`)
      expect(records.map((r) => r.kind)).toEqual(["header", "malformed", "receipt"])
      const bad = records[1]!
      expect(bad.line).toBe(2)
      if (bad.kind === "malformed") expect(bad.reason).toMatch(why)
    }
    expect(readExport(`${JSON.stringify(r1)}\n`)[0]).toMatchObject({ kind: "malformed", line: 1, reason: expect.stringMatching(/before any header/) })
    expect(readExport(`${head}\r\n`)[0]).toMatchObject({ kind: "malformed", reason: expect.stringMatching(/CR/) })
  })
})
