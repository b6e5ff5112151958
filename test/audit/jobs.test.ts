/**
 * `--jobs N`: the signature workers change where seals are checked, never what the audit finds. One
 * tampered synthetic store (several windows, many batches) is audited with the checks in this
 * thread (--jobs 0), one worker and three workers, in batches small enough that every worker gets
 * many: the findings must be the same list, in the same order, with the same messages and details.
 * And the worker stays lean: its import graph holds spec/ and Node's own modules only, never Effect
 * or the app.
 */
import Database from "better-sqlite3"
import { build } from "esbuild"
import { generateKeyPairSync, sign } from "node:crypto"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, relative } from "node:path"
import { beforeAll, describe, expect, it } from "vitest"
import { canonicalJson } from "../../spec/canonicalJson.ts"
import { type Receipt, unsignedPart } from "../../spec/receipt.ts"
import { Seal, sealOfBody, trustedKeyMap, type TrustedKeyData } from "../../spec/audit.ts"
import { startSealPool, type WorkerCode, workerCode } from "../../src/store/auditPool.ts"
import { sodiumModule } from "../../src/store/sodium.ts"
import { audit, tampered } from "./fixture.ts"
import { buildSyntheticStore } from "./synthetic.ts"

let path: string
let planted: number

beforeAll(async () => {
  const store = await buildSyntheticStore(join(mkdtempSync(join(tmpdir(), "tollgate-audit-jobs-")), "synthetic.db"), {
    receipts: 2400,
    projects: 3,
    periods: ["2026-01", "2026-02"]
  })
  const forger = generateKeyPairSync("ed25519").privateKey
  path = tampered(store.path, (db: Database.Database) => {
    const rows = db.prepare(`SELECT id, body FROM receipts ORDER BY id`).all() as Array<{ id: string; body: string }>
    const edit = db.prepare(`UPDATE receipts SET body = ?, signature = ?, credits_charged = ? WHERE id = ?`)
    planted = 0
    for (let i = 7; i < rows.length; i += 97) {
      const r = JSON.parse(rows[i]!.body) as Receipt
      // Alternate: a forged signature (the seal the workers check), an edited charge (hash and charge).
      const forged = i % 2 === 1 ? sign(null, Buffer.from(canonicalJson(unsignedPart(r)), "utf8"), forger).toString("base64url") : r.signature
      const charged = i % 2 === 1 ? r.credits_charged : r.credits_charged + 1
      edit.run(JSON.stringify({ ...r, signature: forged, credits_charged: charged }), forged, charged, rows[i]!.id)
      planted++
    }
    db.prepare(`DELETE FROM receipts WHERE id = ?`).run(rows[1000]!.id) // a gap, and its window off
  })
})

describe("tollgate audit --jobs", () => {
  it("names the same findings, in the same order, with 0, 1 and 3 signature workers, checking with libsodium or node:crypto", async () => {
    const inline = await audit(path, { jobs: 0 })
    expect(inline.ed25519).toBe("libsodium")
    expect(inline.summary.stats.receipts).toBe(2399)
    expect(inline.summary.byKind.signature_invalid).toBeGreaterThanOrEqual(Math.floor(planted / 2) - 1)
    expect(inline.summary.byKind.receipt_hash_mismatch).toBeGreaterThanOrEqual(Math.floor(planted / 2) - 1)
    expect(inline.summary.byKind.chain_gap).toBe(1)
    for (const [jobs, ed25519] of [[0, "node:crypto"], [1, "libsodium"], [3, "libsodium"], [3, "node:crypto"]] as const) {
      const r = await audit(path, { jobs, batch: 50, ed25519 })
      expect(r.jobs).toBe(jobs)
      expect(r.ed25519).toBe(ed25519)
      expect(r.findings).toEqual(inline.findings)
      expect(r.summary).toEqual(inline.summary)
    }
    // The same with a --period walk (chain starts queued between the batches).
    const feb = await audit(path, { jobs: 0, period: "2026-02" })
    expect(feb.findings.length).toBeGreaterThan(0)
    expect((await audit(path, { jobs: 3, batch: 50, period: "2026-02" })).findings).toEqual(feb.findings)
  })

  it("the worker's import graph is spec/, node: and the native loader only — no Effect, no app module but itself", async () => {
    const result = await build({
      entryPoints: [join(process.cwd(), "src/store/auditWorker.ts")],
      bundle: true,
      write: false,
      metafile: true,
      platform: "node",
      format: "esm",
      logLevel: "silent"
    })
    const inputs = Object.keys(result.metafile.inputs).map((p) => relative(process.cwd(), join(process.cwd(), p)))
    expect(inputs).toContain("src/store/auditWorker.ts")
    // The native binding's loader is the one module of src/ beside it (spec/ loads nothing native).
    expect(inputs.filter((p) => p !== "src/store/auditWorker.ts" && p !== "src/store/ed25519Native.ts" && !p.startsWith("spec/"))).toEqual([])
  })
})

describe("the signature workers' two ways to start", () => {
  it("the bundled code and the tsx entry (auditWorker.mjs, for builds without the sources), checking with libsodium or node:crypto, answer the same verdicts", async () => {
    const db = new Database(path, { readonly: true })
    const bodies = (db.prepare(`SELECT body FROM receipts ORDER BY id LIMIT 300`).all() as Array<{ body: string }>).map((r) => r.body)
    const keys = (db.prepare(`SELECT id, public_key AS pem, retired_at AS retiredAt FROM receipt_keys`).all() as Array<TrustedKeyData>)
    db.close()
    bodies.push("not json")
    const code = await workerCode()
    expect("eval" in code).toBe(true)
    const sodium = sodiumModule()
    expect(sodium).toBeDefined()
    const verdicts = async (c: WorkerCode, withSodium = true) => {
      const pool = startSealPool(2, { keys, sodium: withSodium ? sodium : undefined }, c)
      try {
        return [...(await pool.seal(bodies))]
      } finally {
        await pool.close()
      }
    }
    const trusted = trustedKeyMap(keys)
    const here = bodies.map((b) => sealOfBody(b, trusted))
    expect(here).toContain(Seal.badSignature) // the planted forgeries among the first 300
    expect(here.at(-1)).toBe(Seal.malformed)
    expect(await verdicts(code)).toEqual(here)
    expect(await verdicts(code, false)).toEqual(here)
    expect(await verdicts({ url: new URL("../../src/store/auditWorker.mjs", import.meta.url) })).toEqual(here)
  })
})
