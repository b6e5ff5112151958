/**
 * Tampering cases written once, run on every engine (test/audit/engines.test.ts): each plants one
 * kind of damage through plain SQL both engines speak (bodies edited in JavaScript, no JSON
 * functions) and says which findings the audit must name — the same on SQLite and PostgreSQL.
 */
import { generateKeyPairSync, sign } from "node:crypto"
import { windowSubject } from "../../spec/audit.ts"
import { canonicalJson } from "../../spec/canonicalJson.ts"
import { type Receipt, unsignedPart } from "../../spec/receipt.ts"
import type { Tamper } from "./fixture.ts"

export interface CaseContext {
  readonly projectA: string
  readonly projectB: string
  readonly budgetB: number
  /** The window the traffic fell in. */
  readonly period: string
}

export interface ChainRow {
  readonly id: string
  readonly request_id: string
  readonly seq: number
  readonly body: string
  readonly idempotency_key: string | null
  readonly reservation_id: string
}

/** A project's chain as stored, in settlement order, with each request's idempotency key and reservation. */
export const chainOf = (db: Tamper, project: string): Promise<Array<ChainRow>> =>
  db.all<ChainRow>(
    `SELECT r.id, r.request_id, r.seq, r.body, q.idempotency_key, v.id AS reservation_id
       FROM receipts r JOIN requests q ON q.id = r.request_id JOIN reservations v ON v.request_id = r.request_id
      WHERE r.project_id = ? ORDER BY r.seq`,
    project
  )

/** Rewrite one field of a stored receipt, in its body and in its column alike. */
/** The key scope's window a request was held in (issue 41: every call is held in its key's scope too), as the audit names it. */
export const keyWindowOf = async (db: Tamper, requestId: string, period: string): Promise<string> => {
  const [row] = await db.all<{ key_id: string }>(`SELECT key_id FROM reservations WHERE request_id = ?`, requestId)
  return `key:${row!.key_id}/${period}`
}

const setReceiptField = async (db: Tamper, row: ChainRow, field: "credits_charged" | "prev_hash" | "signature", value: string | number) => {
  const body = { ...(JSON.parse(row.body) as Receipt), [field]: value }
  await db.run(`UPDATE receipts SET ${field} = ?, body = ? WHERE id = ?`, value, JSON.stringify(body), row.id)
}

export interface TamperCase {
  readonly name: string
  /** Plant the damage; return the findings the audit must name, as "kind subject" lines. */
  readonly plant: (db: Tamper, ctx: CaseContext) => Promise<Array<string>>
}

export const tamperCases: ReadonlyArray<TamperCase> = [
  {
    name: "untouched: clean",
    plant: async () => []
  },
  {
    name: "edit a charge: names the receipt, its request, reservation, stored response and window",
    plant: async (db, ctx) => {
      const target = (await chainOf(db, ctx.projectA)).find((c) => c.idempotency_key !== null)!
      await setReceiptField(db, target, "credits_charged", (JSON.parse(target.body) as Receipt).credits_charged + 3)
      return [
        `charge_mismatch ${target.id}`,
        `idempotency_mismatch ${target.request_id}`,
        `receipt_hash_mismatch ${target.id}`,
        `request_mismatch ${target.id}`,
        `reservation_mismatch ${target.id}`,
        `window_spent_mismatch ${windowSubject(ctx.projectA, ctx.period)}`,
        // The call's key scope counts the same receipt (issue 41).
        `window_spent_mismatch ${await keyWindowOf(db, target.request_id, ctx.period)}`
      ]
    }
  },
  {
    name: "break a chain link (a receipt relinked to another predecessor): names the link and the edited seal",
    plant: async (db, ctx) => {
      const target = (await chainOf(db, ctx.projectA))[3]!
      await setReceiptField(db, target, "prev_hash", "f".repeat(64))
      return [`chain_broken ${target.id}`, `receipt_hash_mismatch ${target.id}`]
    }
  },
  {
    name: "overspend by direct SQL on a window's spent: names the window as over its cap and off its receipts",
    plant: async (db, ctx) => {
      await db.run(`UPDATE budget_windows SET spent = spent + ? WHERE project_id = ?`, ctx.budgetB, ctx.projectB)
      const w = windowSubject(ctx.projectB, ctx.period)
      return [`window_over_cap ${w}`, `window_spent_mismatch ${w}`]
    }
  },
  {
    name: "forge a signature (another key over the same bytes): names the receipt",
    plant: async (db, ctx) => {
      const target = (await chainOf(db, ctx.projectA))[4]!
      const forger = generateKeyPairSync("ed25519").privateKey
      const body = JSON.parse(target.body) as Receipt
      await setReceiptField(db, target, "signature", sign(null, Buffer.from(canonicalJson(unsignedPart(body)), "utf8"), forger).toString("base64url"))
      return [`signature_invalid ${target.id}`]
    }
  }
]
