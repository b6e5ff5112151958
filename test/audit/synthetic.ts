/**
 * A synthetic store of validly sealed receipts written by direct SQL: the same schema (the real
 * migrations), the same sealing rule (spec/receipt.ts, Ed25519), consistent requests, reservations,
 * budget windows, chain heads and idempotency records — built far faster than real traffic, for the
 * audit benchmark and for tests that need many windows.
 */
import Database from "better-sqlite3"
import { Effect, Layer } from "effect"
import { generateKeyPairSync, type KeyObject } from "node:crypto"
import { receiptKeyId } from "../../spec/audit.ts"
import { canonicalJson } from "../../spec/canonicalJson.ts"
import { accountKey, periodBounds } from "../../spec/ledger.ts"
import { type Prices, settledCharge, type TokenCounts, worstCase } from "../../spec/pricing.ts"
import { GENESIS_HASH, sealReceipt, type UnsignedReceipt } from "../../spec/receipt.ts"
import { makeSettings, Settings } from "../../src/domain/config.ts"
import { DatabaseLive } from "../../src/store/Database.ts"

export const SYNTHETIC_CARD = "rc_synth-1"
export const SYNTHETIC_PRICES: Prices = { input: 150_000, cached_input: 75_000, output: 600_000, reasoning: 900_000 }

export interface SyntheticOptions {
  readonly receipts: number
  readonly projects?: number
  /** Consecutive windows the receipts are spread over (settlement order follows time). */
  readonly periods?: ReadonlyArray<string>
}

export interface SyntheticStore {
  readonly path: string
  readonly publicKeyPem: string
  readonly privateKey: KeyObject
  readonly projects: ReadonlyArray<string>
}

/** Create the schema with the real migrations. */
export const migrate = async (path: string): Promise<void> => {
  const layer = DatabaseLive.pipe(Layer.provide(Layer.succeed(Settings, makeSettings({ databaseUrl: `sqlite:${path}` }))))
  await Effect.runPromise(Effect.scoped(Layer.build(layer)))
}

/** Deterministic pseudo-random integers (xorshift), so stores are reproducible. */
const rng = (seed: number) => {
  let x = seed | 0 || 1
  return (n: number) => {
    x ^= x << 13
    x ^= x >>> 17
    x ^= x << 5
    return (x >>> 0) % n
  }
}

export const buildSyntheticStore = async (path: string, options: SyntheticOptions): Promise<SyntheticStore> => {
  await migrate(path)
  const periods = options.periods ?? ["2026-01", "2026-02"]
  const projectCount = options.projects ?? 4
  const { privateKey, publicKey } = generateKeyPairSync("ed25519")
  const publicKeyPem = publicKey.export({ type: "spki", format: "pem" }) as string
  const keyId = receiptKeyId(publicKeyPem)
  const projects = Array.from({ length: projectCount }, (_, i) => `prj_synth${String(i).padStart(4, "0")}`)
  const random = rng(42)

  const db = new Database(path)
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = OFF")
  const t0 = Date.parse(`${periods[0]}-01T00:00:00Z`)
  const insert = {
    project: db.prepare(
      `INSERT INTO projects (id, organization, name, budget_credits, requests_per_minute, burst, created_at, updated_at) VALUES (?, 'org_synth', ?, ?, 600, 60, ?, ?)`
    ),
    key: db.prepare(`INSERT INTO receipt_keys (id, public_key, created_at) VALUES (?, ?, ?)`),
    card: db.prepare(`INSERT INTO rate_cards (version, effective_from, prices, created_at) VALUES (?, ?, ?, ?)`),
    request: db.prepare(
      `INSERT INTO requests (id, project_id, environment, key_id, endpoint, model, route, stream, status, idempotency_key, rate_card_version,
         credits_reserved, credits_charged, receipt_id, verification, attempts, created_at, completed_at)
       VALUES (?, ?, 'production', 'key_synth', '/v1/chat/completions', 'auto', 'demo', 0, 'completed', ?, ?, ?, ?, ?, '{}', '[]', ?, ?)`
    ),
    reservation: db.prepare(
      `INSERT INTO reservations (id, request_id, project_id, period, amount, state, charge, deadline, created_at, resolved_at) VALUES (?, ?, ?, ?, ?, 'settled', ?, ?, ?, ?)`
    ),
    receipt: db.prepare(
      `INSERT INTO receipts (id, request_id, project_id, environment, period, seq, credits_charged, rate_card_version, body, prev_hash, hash, signature, signing_key_id, created_at)
       VALUES (?, ?, ?, 'production', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
    ),
    idempotency: db.prepare(
      `INSERT INTO idempotency (project_id, environment, key, fingerprint, request_id, state, status, content_type, body, created_at, expires_at)
       VALUES (?, 'production', ?, 'fp', ?, 'finished', 200, 'application/json', ?, ?, ?)`
    ),
    window: db.prepare(`INSERT INTO budget_windows (project_id, period, spent, reserved) VALUES (?, ?, ?, 0)`),
    head: db.prepare(`INSERT INTO chain_heads (project_id, seq, hash) VALUES (?, ?, ?)`)
  }

  db.transaction(() => {
    for (const p of projects) insert.project.run(p, p, Number.MAX_SAFE_INTEGER, t0, t0)
    insert.key.run(keyId, publicKeyPem, t0)
    insert.card.run(SYNTHETIC_CARD, "2000-01-01T00:00:00Z", canonicalJson({ demo: SYNTHETIC_PRICES }), t0)
    const heads = new Map<string, { seq: number; hash: string }>()
    const spent = new Map<string, number>()
    const span = periods.map((p) => periodBounds(p))
    for (let i = 0; i < options.receipts; i++) {
      const project = projects[i % projectCount]!
      // Time advances with i through the windows; a request starts a little before it settles, so
      // near a window's edge settlement order interleaves the two windows.
      const w = Math.min(span.length - 1, Math.floor((i * span.length) / options.receipts))
      const within = (i - Math.floor((w * options.receipts) / span.length)) / Math.ceil(options.receipts / span.length)
      const settledAt = Math.floor(span[w]!.startMillis + within * (span[w]!.endMillis - span[w]!.startMillis - 120_000)) + 60_000
      // Each project's 2nd and 4th receipts of a window (after the first) were requests started in the window before.
      const round = Math.floor((i - Math.floor((w * options.receipts) / span.length)) / projectCount)
      const late = w > 0 && (round === 1 || round === 3)
      const startedAt = late ? span[w]!.startMillis - 1 - random(50_000) : settledAt - 1 - random(50_000)
      const period = periodOfMillis(startedAt, span, periods)
      const tokens: TokenCounts = { input: 10 + random(400), cached_input: random(50), output: 1 + random(300), reasoning: random(20) }
      const reserved = worstCase(tokens.input + tokens.cached_input, 512, SYNTHETIC_PRICES)
      const charged = settledCharge(tokens, SYNTHETIC_PRICES, reserved)
      const n = String(i).padStart(9, "0")
      const requestId = `req_synth${n}`
      const receiptId = `rcpt_synth${n}`
      const head = heads.get(project) ?? { seq: 0, hash: GENESIS_HASH }
      const unsigned: UnsignedReceipt = {
        object: "receipt",
        receipt_id: receiptId,
        request_id: requestId,
        organization: "org_synth",
        project_id: project,
        environment: "production",
        status: "completed",
        verification: { state: "verified", checks: ["route", "schema", "budget"], failed_checks: [] },
        model: "auto",
        route: "demo",
        rate_card_version: SYNTHETIC_CARD,
        tokens,
        usage_source: "reported",
        credits_reserved: reserved,
        credits_charged: charged,
        period,
        seq: head.seq + 1,
        created_at: new Date(settledAt).toISOString(),
        prev_hash: head.hash,
        signing_key_id: keyId
      }
      const { receipt, body } = sealReceipt(privateKey, unsigned)
      const { hash, signature } = receipt
      const idempotencyKey = i % 10 === 0 ? `idem-${n}` : null
      insert.request.run(requestId, project, idempotencyKey, SYNTHETIC_CARD, reserved, charged, receiptId, startedAt, settledAt)
      insert.reservation.run(`res_synth${n}`, requestId, project, period, reserved, charged, startedAt + 900_000, startedAt, settledAt)
      insert.receipt.run(receiptId, requestId, project, period, unsigned.seq, charged, SYNTHETIC_CARD, body, head.hash, hash, signature, keyId, settledAt)
      if (idempotencyKey !== null) {
        const body = JSON.stringify({ id: `chatcmpl-${n}`, object: "chat.completion", governance: { request_id: requestId, status: "completed", credits_charged: charged, receipt_id: receiptId } })
        insert.idempotency.run(project, idempotencyKey, requestId, Buffer.from(body), startedAt, settledAt + 86_400_000)
      }
      heads.set(project, { seq: unsigned.seq, hash })
      const k = accountKey(project, period)
      spent.set(k, (spent.get(k) ?? 0) + charged)
    }
    for (const [k, total] of spent) {
      const [project, period] = JSON.parse(k) as [string, string]
      insert.window.run(project, period, total)
    }
    for (const [project, h] of heads) insert.head.run(project, h.seq, h.hash)
  })()
  db.pragma("wal_checkpoint(TRUNCATE)")
  db.close()
  return { path, publicKeyPem, privateKey, projects }
}

const periodOfMillis = (millis: number, span: ReadonlyArray<{ startMillis: number; endMillis: number }>, periods: ReadonlyArray<string>): string => {
  for (let i = span.length - 1; i >= 0; i--) if (millis >= span[i]!.startMillis) return periods[i]!
  return periods[0]!
}
