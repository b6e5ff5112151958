/**
 * `tollgate audit` on a store built by real traffic: clean as built, then each kind of tampering
 * planted alone, and the audit must name exactly what was planted — the finding kinds and the ids.
 * The cases written once for both engines (a charge edited, a chain link broken, a window's spent
 * edited, a signature forged) are in test/audit/cases.ts, run by test/audit/engines.test.ts; these
 * use SQLite's own SQL.
 */
import { execFile } from "node:child_process"
import { generateKeyPairSync } from "node:crypto"
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import Database from "better-sqlite3"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { windowSubject } from "../../spec/audit.ts"
import { periodOf } from "../../spec/ledger.ts"
import type { Receipt } from "../../spec/receipt.ts"
import { auditCommand } from "../../src/cli/audit.ts"
import { verifyReceiptCommand } from "../../src/cli/verifyReceipt.ts"
import { audit, buildTrafficStore, named, PRICES, tampered, type TrafficStore } from "./fixture.ts"

let store: TrafficStore
let period: string

beforeAll(async () => {
  store = await buildTrafficStore()
  period = periodOf(Date.now())
})
afterAll(async () => {
  await store?.close()
})

interface ChainRow {
  id: string
  request_id: string
  seq: number
  body: string
  idempotency_key: string | null
  reservation_id: string
}

/** Project A's chain as stored, in settlement order, with each request's idempotency key and reservation. */
const chainOf = (db: Database.Database, project: string): Array<ChainRow> =>
  db
    .prepare(
      `SELECT r.id, r.request_id, r.seq, r.body, q.idempotency_key, v.id AS reservation_id
         FROM receipts r JOIN requests q ON q.id = r.request_id JOIN reservations v ON v.request_id = r.request_id
        WHERE r.project_id = ? ORDER BY r.seq`
    )
    .all(project) as Array<ChainRow>

describe("tollgate audit: a store built by real traffic", () => {
  it("reports the untouched store as clean, having checked every receipt", async () => {
    const r = await audit(tampered(store.snapshot))
    expect(named(r)).toEqual([])
    expect(r.summary.clean).toBe(true)
    expect(r.summary.stats.receipts).toBe(21) // 17 settled in A (the replay and the failure add none), 4 in B
    expect(r.summary.stats.chains).toBe(2)
    expect(r.summary.stats.idempotencyRecords).toBe(4) // idem-0..2 and idem-stream; the failed key was released
    expect(r.summary.stats.keys).toBe(1)
  })

  it("edit a charge consistently everywhere but the signature: still named by hash and recomputation", async () => {
    let target!: ChainRow
    const path = tampered(store.snapshot, (db) => {
      target = chainOf(db, store.projectA).find((c) => c.idempotency_key === null)!
      const r = JSON.parse(target.body) as Receipt
      const lower = r.credits_charged - 5
      db.prepare(`UPDATE receipts SET credits_charged = ?, body = json_set(body, '$.credits_charged', ?) WHERE id = ?`).run(lower, lower, target.id)
      db.prepare(`UPDATE requests SET credits_charged = ? WHERE id = ?`).run(lower, target.request_id)
      db.prepare(`UPDATE reservations SET charge = ? WHERE id = ?`).run(lower, target.reservation_id)
      db.prepare(`UPDATE budget_windows SET spent = spent - 5 WHERE project_id = ?`).run(store.projectA)
      db.prepare(`UPDATE scope_windows SET spent = spent - 5 WHERE scope = (SELECT 'key:' || key_id FROM reservations WHERE id = ?)`).run(target.reservation_id)
    })
    expect(named(await audit(path))).toEqual([`charge_mismatch ${target.id}`, `receipt_hash_mismatch ${target.id}`])
  })

  it("delete a receipt: names the gap after it, its orphaned request and the window", async () => {
    let gone!: ChainRow
    let next!: ChainRow
    const path = tampered(store.snapshot, (db) => {
      const chain = chainOf(db, store.projectA)
      const k = chain.findIndex((c, i) => i >= 2 && c.idempotency_key === null)
      gone = chain[k]!
      next = chain[k + 1]!
      db.prepare(`DELETE FROM receipts WHERE id = ?`).run(gone.id)
    })
    expect(named(await audit(path))).toEqual(
      [`chain_gap ${next.id}`, `settled_request_without_receipt ${gone.request_id}`, `window_spent_mismatch ${windowSubject(store.projectA, period)}`, `window_spent_mismatch ${keyWindow(path, gone.request_id)}`].sort()
    )
  })

  it("delete the newest receipt: names the chain head that no longer matches", async () => {
    let gone!: ChainRow
    const path = tampered(store.snapshot, (db) => {
      gone = chainOf(db, store.projectB).at(-1)!
      db.prepare(`DELETE FROM receipts WHERE id = ?`).run(gone.id)
    })
    expect(named(await audit(path))).toEqual(
      [`chain_head_mismatch ${store.projectB}`, `settled_request_without_receipt ${gone.request_id}`, `window_spent_mismatch ${windowSubject(store.projectB, period)}`, `window_spent_mismatch ${keyWindow(path, gone.request_id)}`].sort()
    )
  })

  it("reorder the chain: names both receipts that swapped places", async () => {
    let second!: ChainRow
    let third!: ChainRow
    const path = tampered(store.snapshot, (db) => {
      ;[, second, third] = chainOf(db, store.projectA) as [ChainRow, ChainRow, ChainRow]
      db.prepare(`UPDATE receipts SET seq = -1 WHERE id = ?`).run(second.id)
      db.prepare(`UPDATE receipts SET seq = 2 WHERE id = ?`).run(third.id)
      db.prepare(`UPDATE receipts SET seq = 3 WHERE id = ?`).run(second.id)
    })
    expect(named(await audit(path))).toEqual([`chain_order ${second.id}`, `chain_order ${third.id}`].sort())
  })

  it("change a rate card's price after the fact: names the card", async () => {
    const path = tampered(store.snapshot, (db) => {
      db.prepare(`UPDATE rate_cards SET prices = json_set(prices, '$."gpt-test".output', 700000)`).run()
    })
    const r = await audit(path)
    expect(named(r)).toEqual(["rate_card_mismatch rc_2020-01"])
    // Every receipt whose charge was not capped by its reservation disagrees with the edited card.
    expect(r.findings[0]!.detail).toMatchObject({ receipts_checked: 21, receipts_disagreeing: 20 })
  })

  it("double-settle a reservation (settled, then voided as well): names the reservation", async () => {
    let target!: ChainRow
    const path = tampered(store.snapshot, (db) => {
      target = chainOf(db, store.projectA)[3]!
      db.prepare(`UPDATE reservations SET state = 'voided', charge = 0 WHERE id = ?`).run(target.reservation_id)
    })
    // The key's window no longer finds that receipt among its settled holds (issue 41's scopes).
    expect(named(await audit(path))).toEqual([`reservation_resolved_twice ${target.reservation_id}`, `window_spent_mismatch ${keyWindow(path, target.request_id)}`].sort())
  })

  it("overspend by direct SQL with consistent books (a hold over the cap): names the window", async () => {
    const path = tampered(store.snapshot, (db) => {
      db.prepare(
        `INSERT INTO reservations (id, request_id, project_id, period, amount, state, deadline, created_at)
         VALUES ('res_planted', 'req_planted', ?, ?, ?, 'held', 0, 0)`
      ).run(store.projectB, period, store.budgetB)
      db.prepare(`UPDATE budget_windows SET reserved = reserved + ? WHERE project_id = ?`).run(store.budgetB, store.projectB)
    })
    expect(named(await audit(path))).toEqual([`window_over_cap ${windowSubject(store.projectB, period)}`])
  })

  it("a cap lowered below the window's commitments is grandfathered (one rule, spec/ledger.ts): clean until a hold is made after the change", async () => {
    // What PATCH /admin/v1/projects does: a new cap, and updated_at moves. No hold since: clean.
    const lowered = (db: Database.Database) => {
      const last = (db.prepare(`SELECT MAX(created_at) AS t FROM reservations WHERE project_id = ?`).get(store.projectB) as { t: number }).t
      db.prepare(`UPDATE projects SET budget_credits = 1, updated_at = ? WHERE id = ?`).run(last + 1, store.projectB)
      return last + 1
    }
    expect(named(await audit(tampered(store.snapshot, (db) => void lowered(db))))).toEqual([])
    // A hold made after the change had to fit under the new cap: over it now is a finding.
    const path = tampered(store.snapshot, (db) => {
      const changedAt = lowered(db)
      db.prepare(
        `INSERT INTO reservations (id, request_id, project_id, period, amount, state, deadline, created_at)
         VALUES ('res_after', 'req_after', ?, ?, 0, 'held', 0, ?)`
      ).run(store.projectB, period, changedAt + 1)
    })
    expect(named(await audit(path))).toEqual([`window_over_cap ${windowSubject(store.projectB, period)}`])
  })

  it("a receipt whose request row was deleted: names the receipt", async () => {
    let target!: ChainRow
    const path = tampered(store.snapshot, (db) => {
      target = chainOf(db, store.projectB)[1]!
      db.prepare(`DELETE FROM requests WHERE id = ?`).run(target.request_id)
    })
    expect(named(await audit(path))).toEqual([`receipt_without_request ${target.id}`])
  })

  it("a receipt signed by a key the operator does not trust: named when keys are pinned", async () => {
    const stranger = generateKeyPairSync("ed25519").publicKey.export({ type: "spki", format: "pem" }) as string
    const r = await audit(tampered(store.snapshot), { publicKeys: [stranger] })
    expect(r.summary.byKind).toEqual({ signing_key_unknown: 21 })
  })
})

/** The key scope's window a request was held in, read from a tampered copy (as the audit names it). */
const keyWindow = (path: string, requestId: string): string => {
  const db = new Database(path, { readonly: true })
  try {
    return `key:${(db.prepare(`SELECT key_id FROM reservations WHERE request_id = ?`).get(requestId) as { key_id: string }).key_id}/${period}`
  } finally {
    db.close()
  }
}

describe("tollgate audit: filters", () => {
  it("--project audits one project's chain and windows only", async () => {
    const path = tampered(store.snapshot, (db) => {
      db.prepare(`UPDATE budget_windows SET spent = spent + 1 WHERE project_id = ?`).run(store.projectA)
    })
    const onlyB = await audit(path, { project: store.projectB })
    expect(named(onlyB)).toEqual([])
    // Project B's window and its key's (issue 41: every call is held in its key's scope too).
    expect(onlyB.summary.stats).toMatchObject({ receipts: 4, chains: 1, windows: 2 })
    expect(named(await audit(path, { project: store.projectA }))).toEqual([`window_spent_mismatch ${windowSubject(store.projectA, period)}`])
  })

  it("--period walks the chains over the window and still checks the link into it", async () => {
    const path = tampered(store.snapshot)
    const now = await audit(path, { period })
    expect(named(now)).toEqual([])
    expect(now.summary.stats.receipts).toBe(21)
    expect((await audit(path, { period: "2019-01" })).summary.stats.receipts).toBe(0)
  })
})

/** Run the real `tollgate` CLI in a child process (async: this process keeps serving the gateway). */
const tollgate = (args: ReadonlyArray<string>): Promise<{ code: number; stdout: string; stderr: string }> =>
  new Promise((resolve) => {
    execFile(process.execPath, ["--import", "tsx", "src/cli/main.ts", ...args], { cwd: process.cwd(), env: { ...process.env, DATABASE_URL: "" } }, (err, stdout, stderr) =>
      resolve({ code: err === null ? 0 : typeof err.code === "number" ? err.code : -1, stdout, stderr })
    )
  })

/** Run a command in-process, capturing what it writes to stdout. */
const captured = async (run: () => Promise<number>): Promise<{ code: number; stdout: string }> => {
  let stdout = ""
  const spy = vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => {
    stdout += typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8")
    return true
  })
  const quiet = vi.spyOn(process.stderr, "write").mockImplementation(() => true)
  try {
    return { code: await run(), stdout }
  } finally {
    spy.mockRestore()
    quiet.mockRestore()
  }
}

describe("the tollgate CLI", () => {
  it("audit: exit 0 and clean on the untouched store, exit 1 naming the finding on a tampered one (the real binary)", async () => {
    const clean = await captured(() => auditCommand(["--database", `sqlite:${tampered(store.snapshot)}`, "--json"]))
    expect(clean.code).toBe(0)
    expect(JSON.parse(clean.stdout)).toMatchObject({ clean: true, findings_total: 0, stats: { receipts: 21 }, ed25519: "libsodium" })

    let target!: ChainRow
    const path = tampered(store.snapshot, (db) => {
      target = chainOf(db, store.projectA)[4]!
      db.prepare(`UPDATE receipts SET signature = ?, body = json_set(body, '$.signature', ?) WHERE id = ?`).run("AAAA", "AAAA", target.id)
    })
    const dirty = await tollgate(["audit", "--database", path, "--json"])
    expect(dirty.code).toBe(1)
    expect(JSON.parse(dirty.stdout).findings.map((f: { kind: string; subject: string }) => `${f.kind} ${f.subject}`)).toEqual([`signature_invalid ${target.id}`])

    const human = await captured(() => auditCommand(["--database", path]))
    expect(human.code).toBe(1)
    expect(human.stdout).toMatch(new RegExp(`signature_invalid +${target.id}`))
  })

  it("audit: exit 2 when the store cannot be read or the arguments are wrong", async () => {
    expect((await captured(() => auditCommand(["--database", "sqlite:/nonexistent/tollgate.db"]))).code).toBe(2)
    expect((await captured(() => auditCommand(["--period", "2026-13", "--database", store.snapshot]))).code).toBe(2)
    expect((await captured(() => auditCommand(["--database", "postgres://127.0.0.1:1/tollgate"]))).code).toBe(2) // nothing listens
    expect((await captured(() => auditCommand(["--database", "mysql://127.0.0.1/tollgate"]))).code).toBe(2)
    expect((await captured(() => auditCommand(["--jobs", "-1", "--database", store.snapshot]))).code).toBe(2)
    expect((await captured(() => auditCommand(["--bogus"]))).code).toBe(2)
  })

  it("verify-receipt: a served receipt verifies with --url and with --public-key; an edited one does not", async () => {
    const dir = mkdtempSync(join(tmpdir(), "tollgate-verify-"))
    const file = join(dir, "receipt.json")
    writeFileSync(file, store.exportedReceipt)
    const byUrl = await tollgate(["verify-receipt", file, "--url", store.gw.origin])
    expect(byUrl.stdout).toContain("VALID")
    expect(byUrl.code).toBe(0)

    const keys = (await (await fetch(`${store.gw.url}/receipts/keys`)).json()) as { data: Array<{ id: string; public_key: string }> }
    const pem = join(dir, "key.pem")
    writeFileSync(pem, keys.data[0]!.public_key)
    expect((await captured(() => verifyReceiptCommand([file, "--public-key", pem, "--json"]))).code).toBe(0)

    // The offline snippet of docs/receipts.md, run as written: node:crypto only, no Tollgate code.
    const doc = readFileSync(join(process.cwd(), "docs/receipts.md"), "utf8")
    const snippet = /```js\n(\/\/ verify\.mjs[\s\S]*?)```/.exec(doc)?.[1]
    expect(snippet).toBeDefined()
    const script = join(dir, "verify.mjs")
    writeFileSync(script, snippet!)
    const runSnippet = (receiptFile: string) =>
      new Promise<{ code: number; stdout: string }>((resolve) =>
        execFile(process.execPath, [script, receiptFile, pem], (err, stdout) => resolve({ code: err === null ? 0 : (err.code as number), stdout }))
      )
    expect(await runSnippet(file)).toEqual({ code: 0, stdout: "valid\n" })

    const edited = JSON.parse(store.exportedReceipt) as Receipt
    writeFileSync(file, JSON.stringify({ ...edited, credits_charged: edited.credits_charged + 1 }))
    const bad = await captured(() => verifyReceiptCommand([file, "--public-key", pem, "--json"]))
    expect(bad.code).toBe(1)
    expect(JSON.parse(bad.stdout).checks.filter((c: { ok: boolean }) => !c.ok).map((c: { check: string }) => c.check)).toEqual(["hash", "signature"])
    expect((await runSnippet(file)).code).toBe(1)

    // With the rate card, the charge itself is recomputed.
    writeFileSync(file, store.exportedReceipt)
    const card = join(dir, "card.json")
    writeFileSync(card, JSON.stringify({ version: "rc_2020-01", effective_from: "2020-01-01T00:00:00Z", prices: { "gpt-test": { ...PRICES, output: PRICES.output + 1_000_000 } } }))
    const repriced = await captured(() => verifyReceiptCommand([file, "--public-key", pem, "--rate-card", card, "--json"]))
    expect(repriced.code).toBe(1)
    expect(JSON.parse(repriced.stdout).checks.filter((c: { ok: boolean }) => !c.ok).map((c: { check: string }) => c.check)).toEqual(["charge"])
  })
})
