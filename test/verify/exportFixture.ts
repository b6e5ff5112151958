/**
 * Signed exports for `tollgate verify`'s tests and bench: a project's chain of receipts sealed with the
 * gateway's own sealing code (spec/receipt.ts `sealReceipt`, signed by src/store/sodium.ts's signer,
 * libsodium where it loads), written as the export format (spec/export.ts) with a header carrying the
 * key and the rate card, plus signed checkpoints (spec/checkpoint.ts) and a signed statement
 * (spec/statement.ts) made the way the gateway makes them. Lines are generated one at a time, so a
 * million receipts never sit in memory.
 */
import { generateKeyPairSync, type KeyObject } from "node:crypto"
import { noteSignerOfKey, originOf, signCheckpoint } from "../../spec/checkpoint.ts"
import { receiptKeyIdOfPem } from "../../spec/ed25519.ts"
import { type ExportKey, headerLine } from "../../spec/export.ts"
import { CompactRange, receiptLeafHash } from "../../spec/merkle.ts"
import { type RateCard, settledCharge, type TokenCounts } from "../../spec/pricing.ts"
import { GENESIS_HASH, type UnsignedReceipt } from "../../spec/receipt.ts"
import { type Statement, statementSignedBytes, type StatementTotals, type UnsignedStatement } from "../../spec/statement.ts"
import { fastestEd25519, fastestSealer } from "../../src/store/sodium.ts"

export const PROJECT = "prj_verify0001"
export const PERIOD = "2026-11"
export const RATE_CARD: RateCard = {
  version: "rc_2026-11",
  effective_from: "2026-11-01T00:00:00.000Z",
  prices: { "gpt-4o-mini": { input: 150, cached_input: 75, output: 600 }, "gpt-4o": { input: 2500, output: 10000 } }
}

export interface SigningKey {
  readonly privateKey: KeyObject
  readonly entry: ExportKey
}

export const makeKey = (): SigningKey => {
  const { privateKey, publicKey } = generateKeyPairSync("ed25519")
  const pem = publicKey.export({ type: "spki", format: "pem" }) as string
  return { privateKey, entry: { id: receiptKeyIdOfPem(pem)!, algorithm: "Ed25519", public_key: pem, created_at: "2026-11-01T00:00:00.000Z", retired_at: null } }
}

/** Deterministic token counts of receipt `seq` (`variant` makes another history of the same size). */
const tokensOf = (seq: number, variant: number): TokenCounts => ({
  input: 100 + ((seq * 7919 + variant * 31) % 4000),
  cached_input: seq % 5 === 0 ? 64 : 0,
  output: 20 + ((seq * 104729 + variant) % 900),
  reasoning: 0
})

export interface ChainOptions {
  readonly key: SigningKey
  readonly count: number
  /** Another value: a different, equally well-signed history of the same length. */
  readonly variant?: number
  /** Leave out the content of receipt `skip` and seal the rest after it again: a clean chain, one receipt fewer. */
  readonly skip?: number
  /** The project (default PROJECT): another, to seed a gateway's own project (bench/exportServer.ts). */
  readonly project?: string
}

/** The sealed receipts' stored bodies (canonical JSON, what the export serves) in chain order, and their hashes. */
export function* chainBodies(o: ChainOptions): Generator<{ readonly body: string; readonly hash: string; readonly unsigned: UnsignedReceipt }> {
  const seal = fastestSealer(o.key.privateKey)
  let prev = GENESIS_HASH
  for (let seq = 1; seq <= o.count; seq++) {
    const route = seq % 3 === 0 ? "gpt-4o" : "gpt-4o-mini"
    const tokens = tokensOf(o.skip !== undefined && seq >= o.skip ? seq + 1 : seq, o.variant ?? 0)
    const reserved = 2_000_000
    const unsigned: UnsignedReceipt = {
      object: "receipt",
      receipt_id: `rcpt_${String(seq).padStart(8, "0")}`,
      request_id: `req_${String(seq).padStart(8, "0")}`,
      organization: "org_default",
      project_id: o.project ?? PROJECT,
      environment: "production",
      status: "completed",
      verification: { state: "verified", checks: ["route", "usage", "budget"], failed_checks: [] },
      model: route,
      route,
      rate_card_version: RATE_CARD.version,
      tokens,
      usage_source: "reported",
      credits_reserved: reserved,
      credits_charged: settledCharge(tokens, RATE_CARD.prices[route]!, reserved),
      period: PERIOD,
      seq,
      created_at: new Date(Date.UTC(2026, 10, 2) + seq * 1000).toISOString(),
      prev_hash: prev,
      signing_key_id: o.key.entry.id
    }
    const sealed = seal(unsigned)
    prev = sealed.receipt.hash
    yield { body: sealed.body, hash: sealed.receipt.hash, unsigned }
  }
}

export const exportHeader = (key: SigningKey, period: string | null = null): string =>
  headerLine({ project_id: PROJECT, period, cursor: null, next_cursor: null, keys: [key.entry], rate_cards: [RATE_CARD] })

/** The whole export's lines (header first), each without its newline. */
export const exportLines = (o: ChainOptions): Array<string> => [exportHeader(o.key), ...[...chainBodies(o)].map((b) => b.body)]

/** A signed checkpoint of the first `size` receipts' hashes, as the gateway serves it. */
export const checkpointOf = (key: SigningKey, hashes: ReadonlyArray<string>, size: number = hashes.length): string => {
  const tree = new CompactRange()
  for (const h of hashes.slice(0, size)) tree.append(receiptLeafHash(h))
  return signCheckpoint(
    { origin: originOf(PROJECT), treeSize: size, rootHash: tree.root(), extensions: ["time 2026-12-01T00:00:00.000Z"] },
    [noteSignerOfKey(key.entry.id, key.privateKey, fastestEd25519())]
  )
}

/** The signed statement of PERIOD with these totals (spec/statement.ts `statementFromReceipts`), closed at a checkpoint of all the hashes. */
export const statementOf = (key: SigningKey, totals: StatementTotals, hashes: ReadonlyArray<string>, cap = 1_000_000_000): Statement => {
  const unsigned: UnsignedStatement = {
    object: "statement",
    version: 1,
    project_id: PROJECT,
    period: PERIOD,
    cap,
    ...totals,
    checkpoint: checkpointOf(key, hashes),
    closed_at: "2026-12-01T00:00:00.000Z",
    signing_key_id: key.entry.id
  }
  const signature = fastestEd25519().signerFor(key.privateKey)(Buffer.from(statementSignedBytes(unsigned))).toString("base64url")
  return { ...unsigned, signature }
}
