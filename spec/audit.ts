/**
 * The audit rulebook (docs/contract.md §4, §6): what `tollgate audit` checks in a live store, as a pure
 * checker you feed rows to. It does no I/O: the caller streams rows out of whatever store it reads
 * (src/store/auditReader.ts, through the port of src/store/auditSource.ts, on SQLite or PostgreSQL) and the checker keeps bounded state — one chain head per
 * project, one sum per (project, window), one tally per rate card — and reports findings through a
 * callback as it goes. Memory does not grow with the number of receipts.
 *
 * Feeding order:
 *   1. context: `keys`, `rateCards`, `projects`, `windows`, `chainHeads` (small tables, all rows);
 *   2. `receipt` for every receipt, ordered by (project_id, seq) — the settlement order of each chain;
 *      for a partial walk, call `chainStart` before a project's first receipt; a receipt's seal
 *      verdict (spec/audit/seal.ts) or its facts (spec/audit/facts.ts, `receiptWithFacts`) may come
 *      computed elsewhere (the signature workers);
 *   3. `heldReservation`, `unreceipted`, `idempotency` (any order);
 *   4. `finish()` — window sums, caps, chain heads and per-card tallies are settled here.
 *
 * It reuses the other models: charges are recomputed with spec/pricing.ts (`settledCharge`, BigInt,
 * integer-exact), hashes and signatures follow spec/receipt.ts, windows spec/ledger.ts.
 */
import { createPublicKey, type KeyObject } from "node:crypto"
import { periodBounds } from "./ledger.ts"
import { type Prices, settledCharge, type TokenCounts } from "./pricing.ts"
import type { Receipt } from "./receipt.ts"
import { type Finding, type FindingKind, type Report } from "./audit/findings.ts"
import { governanceOf, parseReceipt, receiptKeyId } from "./audit/receipts.ts"
import { type BatchFacts, columnMismatches, Facts, FACTS_STRIDE, type SignedFields, signedColumns } from "./audit/facts.ts"
import { makeChainChecks } from "./audit/chain.ts"
import { makeWindowChecks } from "./audit/windows.ts"
import { type EndUserDefaultRow, makeScopeWindowChecks, type ScopeCapRow, type ScopeHoldsRow, type ScopeWindowRow } from "./audit/scopeWindows.ts"
import { type Ed25519, nodeEd25519 } from "./ed25519.ts"
import { Seal, type SealCode, sealOfStored, type TrustedKey, trustedKey, type TrustedKeyData } from "./audit/seal.ts"
import type { AuditScope, AuditStats, AuditSummary, ChainHeadRow, IdempotencyRow, KeyRow, ProjectRow, RateCardRow, ReceiptRow, HeldReservationRow, UnreceiptedRow, WindowRow } from "./audit/rows.ts"

export * from "./ed25519.ts"
export * from "./audit/facts.ts"
export * from "./audit/findings.ts"
export * from "./audit/receipts.ts"
export * from "./audit/rows.ts"
export * from "./audit/seal.ts"

// ---------------------------------------------------------------------------------------------
// The checker: scope, keys, rate cards and the per-receipt checks; the chain and window checks
// are spec/audit/chain.ts and spec/audit/windows.ts.

interface CardTally {
  checked: number
  disagreeing: number
  readonly examples: Array<string>
}

const EXAMPLES = 5

export interface Auditor {
  /** Trusted public keys (from the store, or pinned by the operator). */
  readonly keys: (rows: Iterable<KeyRow>) => void
  readonly rateCards: (rows: Iterable<RateCardRow>) => void
  readonly projects: (rows: Iterable<ProjectRow>) => void
  readonly windows: (rows: Iterable<WindowRow>) => void
  /** The key and end-user scopes' windows (spec/audit/scopeWindows.ts): the stored rows, their holds' sums, the caps. */
  readonly scopeWindows: (rows: Iterable<ScopeWindowRow>) => void
  readonly scopeHolds: (rows: Iterable<ScopeHoldsRow>) => void
  readonly scopeCaps: (rows: Iterable<ScopeCapRow>, endUserDefaults: Iterable<EndUserDefaultRow>) => void
  readonly chainHeads: (rows: Iterable<ChainHeadRow>) => void
  /**
   * A partial walk of `project`'s chain starts at `seq`; `prevHash` is the hash of receipt seq−1 when
   * known. Without this call a project's chain is expected to start at seq 1 with the genesis hash.
   */
  readonly chainStart: (project: string, seq: number, prevHash: string | undefined) => void
  /**
   * One receipt, in chain order. `seal`: its seal verdict when already computed elsewhere (a
   * signature worker, from the same `sealOfBody`); computed here when absent.
   */
  readonly receipt: (row: ReceiptRow, seal?: SealCode) => void
  /**
   * One receipt, in chain order, with its batch's facts from a signature worker (spec/audit/facts.ts,
   * `batchFacts`): a plain receipt is checked on its columns and facts without parsing its body again;
   * any other is checked as by `receipt`.
   */
  readonly receiptWithFacts: (row: ReceiptRow, facts: BatchFacts, index: number) => void
  /** The keys trusted so far (after `keys`), as plain data for the signature workers. */
  readonly trustedKeys: () => ReadonlyArray<TrustedKeyData>
  readonly heldReservation: (row: HeldReservationRow) => void
  readonly unreceipted: (row: UnreceiptedRow) => void
  readonly idempotency: (row: IdempotencyRow) => void
  readonly finish: () => AuditSummary
  readonly stats: AuditStats
}

/** `ed25519`: the implementation that checks signatures here (spec/ed25519.ts); the findings do not depend on it. */
export const makeAuditor = (onFinding: (finding: Finding) => void, scope: AuditScope = {}, ed25519: Ed25519 = nodeEd25519): Auditor => {
  const byKind: Partial<Record<FindingKind, number>> = {}
  let total = 0
  const report: Report = (kind, subject, project, message, detail) => {
    total++
    byKind[kind] = (byKind[kind] ?? 0) + 1
    onFinding(detail === undefined ? { kind, subject, project, message } : { kind, subject, project, message, detail })
  }

  const stats: AuditStats = { receipts: 0, chains: 0, windows: 0, heldReservations: 0, idempotencyRecords: 0, rateCards: 0, keys: 0 }
  const trusted = new Map<string, TrustedKey>()
  const trustedData: Array<TrustedKeyData> = []
  const cards = new Map<string, { readonly effectiveFrom: number; readonly prices: Readonly<Record<string, Prices>> | undefined }>()
  const caps = new Map<string, { readonly cap: number; readonly changedAt: number | undefined }>()
  const chainChecks = makeChainChecks(report)
  const windowChecks = makeWindowChecks(report)
  const windowOf = windowChecks.windowOf
  // The key and end-user scopes' windows (issue 41), by the same rule as a project's.
  const scopeChecks = makeScopeWindowChecks(report)
  const cardTallies = new Map<string, CardTally>()
  const missingCards = new Map<string, { count: number; readonly routes: Set<string>; readonly examples: Array<string> }>()

  const inScope = (project: string, period: string) =>
    (scope.project === undefined || scope.project === project) && (scope.period === undefined || scope.period === period)

  const keys = (rows: Iterable<KeyRow>) => {
    for (const row of rows) {
      stats.keys++
      let key: KeyObject
      let derived: string
      try {
        key = createPublicKey(row.public_key)
        derived = receiptKeyId(row.public_key)
      } catch {
        report("signing_key_invalid", row.id, undefined, `public key ${row.id} is not a readable public key`)
        continue
      }
      if (key.asymmetricKeyType !== "ed25519") {
        report("signing_key_invalid", row.id, undefined, `public key ${row.id} is ${key.asymmetricKeyType}, not Ed25519`)
        continue
      }
      if (derived !== row.id) {
        report("signing_key_invalid", row.id, undefined, `public key ${row.id} hashes to ${derived}: its id was not derived from it`, { derived_id: derived })
        continue
      }
      trusted.set(row.id, trustedKey(key, row.retired_at, ed25519))
      trustedData.push({ id: row.id, pem: row.public_key, retiredAt: row.retired_at })
    }
  }

  const rateCards = (rows: Iterable<RateCardRow>) => {
    for (const row of rows) {
      stats.rateCards++
      let prices: Record<string, Prices> | undefined
      try {
        const parsed = JSON.parse(row.prices) as unknown
        prices = parsed !== null && typeof parsed === "object" ? (parsed as Record<string, Prices>) : undefined
      } catch {
        prices = undefined
      }
      cards.set(row.version, { effectiveFrom: Date.parse(row.effective_from), prices })
    }
  }

  const projects = (rows: Iterable<ProjectRow>) => {
    for (const row of rows) caps.set(row.id, { cap: row.budget_credits, changedAt: row.updated_at })
  }

  /** Report what the seal verdict (spec/audit/seal.ts) says is wrong; true when intact. */
  const checkSeal = (row: ReceiptRow, receipt: Receipt, code: SealCode): boolean => {
    switch (code) {
      case Seal.intact:
        return true
      case Seal.hashMismatch:
        report("receipt_hash_mismatch", row.id, row.project_id, `receipt ${row.id} does not hash to its recorded hash: its content was changed after sealing`)
        return false
      case Seal.unknownKey:
        report("signing_key_unknown", row.id, row.project_id, `receipt ${row.id} is signed by ${receipt.signing_key_id}, which is not a trusted key`, {
          signing_key_id: receipt.signing_key_id
        })
        return false
      case Seal.badSignature:
        report("signature_invalid", row.id, row.project_id, `the signature of receipt ${row.id} does not verify with key ${receipt.signing_key_id}`)
        return false
      case Seal.retiredKey: {
        const retiredAt = trusted.get(receipt.signing_key_id)?.retiredAt ?? 0
        report("signing_key_retired", row.id, row.project_id, `receipt ${row.id} was signed by ${receipt.signing_key_id} after that key was retired`, {
          retired_at: new Date(retiredAt).toISOString(),
          created_at: receipt.created_at
        })
        return false
      }
      case Seal.malformed:
        // A worker could not parse what this thread parsed: not possible with one parser; verify here.
        return checkSeal(row, receipt, sealOfStored(row.body, receipt, trusted))
    }
  }

  const checkCharge = (row: ReceiptRow, receipt: SignedFields, intact: boolean) => {
    if (receipt.credits_charged > receipt.credits_reserved) {
      report("charge_exceeds_reservation", row.id, row.project_id, `receipt ${row.id} charges ${receipt.credits_charged} Credits but reserved only ${receipt.credits_reserved}`, {
        credits_charged: receipt.credits_charged,
        credits_reserved: receipt.credits_reserved
      })
    }
    const card = cards.get(receipt.rate_card_version)
    const prices = card?.prices?.[receipt.route]
    if (card === undefined || prices === undefined) {
      let m = missingCards.get(receipt.rate_card_version)
      if (m === undefined) {
        m = { count: 0, routes: new Set(), examples: [] }
        missingCards.set(receipt.rate_card_version, m)
      }
      m.count++
      if (card !== undefined) m.routes.add(receipt.route)
      if (m.examples.length < EXAMPLES) m.examples.push(row.id)
      return
    }
    const startedAt = row.request?.created_at
    if (startedAt !== undefined && card.effectiveFrom > startedAt) {
      report("rate_card_not_in_force", row.id, row.project_id, `receipt ${row.id} is priced by ${receipt.rate_card_version}, not yet in force when its request started`)
    }
    let expected: number
    try {
      expected = settledCharge(receipt.tokens as TokenCounts, prices, receipt.credits_reserved)
    } catch {
      expected = Number.NaN // prices that are not integers: nothing recomputes under them
    }
    let tally = cardTallies.get(receipt.rate_card_version)
    if (tally === undefined) {
      tally = { checked: 0, disagreeing: 0, examples: [] }
      cardTallies.set(receipt.rate_card_version, tally)
    }
    tally.checked++
    if (expected === receipt.credits_charged) return
    if (intact) {
      // The gateway signed this charge: either the card changed since, or the gateway mischarged.
      // One finding per card (at the end), not one per receipt.
      tally.disagreeing++
      if (tally.examples.length < EXAMPLES) tally.examples.push(row.id)
    } else {
      report("charge_mismatch", row.id, row.project_id, `receipt ${row.id} charges ${receipt.credits_charged} Credits; its tokens under ${receipt.rate_card_version} come to ${expected}`, {
        credits_charged: receipt.credits_charged,
        recomputed: expected
      })
    }
  }

  const checkRequest = (row: ReceiptRow, receipt: SignedFields) => {
    const q = row.request
    if (q === null) {
      report("receipt_without_request", row.id, row.project_id, `receipt ${row.id} names request ${receipt.request_id}, which does not exist`, { request_id: receipt.request_id })
      return
    }
    const fields: Array<string> = []
    if (q.status !== "completed") fields.push("status")
    if (q.receipt_id !== receipt.receipt_id) fields.push("receipt_id")
    if (q.credits_charged !== receipt.credits_charged) fields.push("credits_charged")
    if (q.credits_reserved !== receipt.credits_reserved) fields.push("credits_reserved")
    if (q.project_id !== receipt.project_id) fields.push("project_id")
    if (q.environment !== receipt.environment) fields.push("environment")
    if (q.rate_card_version !== receipt.rate_card_version) fields.push("rate_card_version")
    if (fields.length > 0) {
      report("request_mismatch", row.id, row.project_id, `receipt ${row.id} and request ${q.id} disagree on ${fields.join(", ")}`, { request_id: q.id, fields })
    }
  }

  const checkReservation = (row: ReceiptRow, receipt: SignedFields) => {
    const v = row.reservation
    if (v === null) {
      report("receipt_without_reservation", row.id, row.project_id, `receipt ${row.id}: request ${receipt.request_id} holds no reservation`, { request_id: receipt.request_id })
      return
    }
    if (v.state === "voided") {
      report("reservation_resolved_twice", v.id, row.project_id, `reservation ${v.id} is voided, yet receipt ${row.id} settled it`, { receipt_id: row.id })
      return
    }
    const fields: Array<string> = []
    if (v.state !== "settled") fields.push("state")
    if (v.amount !== receipt.credits_reserved) fields.push("amount")
    if (v.charge !== receipt.credits_charged) fields.push("charge")
    if (v.project_id !== receipt.project_id) fields.push("project_id")
    if (v.period !== receipt.period) fields.push("period")
    if (fields.length > 0) {
      report("reservation_mismatch", row.id, row.project_id, `receipt ${row.id} and reservation ${v.id} disagree on ${fields.join(", ")}`, {
        reservation_id: v.id,
        fields,
        state: v.state
      })
    }
  }

  const receipt = (row: ReceiptRow, seal?: SealCode) => {
    stats.receipts++
    const parsed = parseReceipt(row.body)
    if (typeof parsed === "string") {
      report("receipt_malformed", row.id, row.project_id, `receipt ${row.id}: ${parsed}`)
      chainChecks.check(row, row.seq, row.prev_hash, row.hash)
      const w = windowOf(row.project_id, row.period)
      w.receiptSum += row.credits_charged
      w.receipts++
      return
    }
    const r = parsed
    const columns = columnMismatches(signedColumns(row), r)
    if (columns.length > 0) {
      report("receipt_column_mismatch", row.id, row.project_id, `receipt ${row.id}: columns ${columns.join(", ")} disagree with the signed body`, { fields: columns })
    }
    const intact = checkSeal(row, r, seal ?? sealOfStored(row.body, r, trusted))
    ordered(row, r, r.seq, r.prev_hash, r.hash, intact)
  }

  /** The checks after the seal, in chain order, on the signed fields. */
  const ordered = (row: ReceiptRow, r: SignedFields, seq: number, prevHash: string, hash: string, intact: boolean) => {
    chainChecks.check(row, seq, prevHash, hash)
    checkCharge(row, r, intact)
    checkRequest(row, r)
    checkReservation(row, r)
    // The signed body is the record of what was charged.
    const w = windowOf(r.project_id, r.period)
    w.receiptSum += r.credits_charged
    w.receipts++
  }

  const plainReceipt = (row: ReceiptRow, facts: Float64Array, at: number, routes: ReadonlyArray<string>) => {
    stats.receipts++
    // Plain: every column agrees with the signed body, so the columns stand for its fields.
    const r: SignedFields = {
      receipt_id: row.id,
      request_id: row.request_id,
      project_id: row.project_id,
      environment: row.environment,
      period: row.period,
      credits_charged: row.credits_charged,
      credits_reserved: facts[at + 2]!,
      rate_card_version: row.rate_card_version,
      route: routes[facts[at + 7]!]!,
      tokens: { input: facts[at + 3]!, cached_input: facts[at + 4]!, output: facts[at + 5]!, reasoning: facts[at + 6]! }
    }
    ordered(row, r, facts[at + 1]!, row.prev_hash, row.hash, true)
  }

  const receiptWithFacts = (row: ReceiptRow, facts: BatchFacts, index: number) => {
    const at = index * FACTS_STRIDE
    if (facts.numbers[at] === Facts.plain) plainReceipt(row, facts.numbers, at, facts.routes)
    else receipt(row)
  }

  const heldReservation = (row: HeldReservationRow) => {
    stats.heldReservations++
    windowOf(row.project_id, row.period).heldSum += row.amount
  }

  const unreceipted = (row: UnreceiptedRow) => {
    const why = row.request_status === "completed" ? "is completed" : `has its reservation ${row.reservation_id ?? "?"} settled`
    report("settled_request_without_receipt", row.request_id, row.project_id, `request ${row.request_id} ${why} but has no receipt`, {
      request_status: row.request_status,
      reservation_id: row.reservation_id,
      reservation_state: row.reservation_state
    })
  }

  const idempotency = (row: IdempotencyRow) => {
    stats.idempotencyRecords++
    const where = { key: row.key, environment: row.environment }
    if (row.state === "in_flight") {
      if (row.receipt_id !== null || row.request_status === "completed") {
        report("idempotency_mismatch", row.request_id, row.project_id, `idempotency key of request ${row.request_id} is still in flight although the request settled`, where)
      }
      return
    }
    if (row.receipt_id === null) {
      report("idempotency_without_receipt", row.request_id, row.project_id, `idempotency record of request ${row.request_id} stores a finished response, but the request has no receipt`, where)
      return
    }
    const problems: Array<string> = []
    if (row.receipt_project_id !== row.project_id || row.receipt_environment !== row.environment) problems.push("scope")
    const g = governanceOf(row.body)
    if (g === undefined) problems.push("governance")
    else {
      if (g["receipt_id"] !== row.receipt_id) problems.push("receipt_id")
      if (g["credits_charged"] !== row.receipt_credits_charged) problems.push("credits_charged")
      if (g["request_id"] !== row.request_id) problems.push("request_id")
    }
    if (problems.length > 0) {
      report("idempotency_mismatch", row.request_id, row.project_id, `the stored response of request ${row.request_id} disagrees with its receipt on ${problems.join(", ")}`, {
        ...where,
        fields: problems
      })
    }
  }

  const finish = (): AuditSummary => {
    for (const [version, m] of missingCards) {
      report("rate_card_missing", version, undefined, m.routes.size > 0
        ? `rate card ${version} has no prices for route(s) ${[...m.routes].join(", ")} named by ${m.count} receipt(s)`
        : `rate card ${version}, named by ${m.count} receipt(s), is not in the store`, { receipts: m.count, examples: m.examples })
    }
    for (const [version, t] of cardTallies) {
      if (t.disagreeing > 0) {
        report("rate_card_mismatch", version, undefined, `${t.disagreeing} of ${t.checked} signed receipts priced by ${version} do not recompute under its stored prices`, {
          receipts_checked: t.checked,
          receipts_disagreeing: t.disagreeing,
          examples: t.examples
        })
      }
    }
    stats.windows += windowChecks.finish(inScope, (project) => caps.get(project))
    stats.windows += scopeChecks.finish(inScope)
    stats.chains = chainChecks.finish(scope)
    return { clean: total === 0, findings: total, byKind: { ...byKind }, stats: { ...stats } }
  }

  const trustedKeys = () => [...trustedData]

  return { keys, rateCards, projects, windows: windowChecks.windows, scopeWindows: scopeChecks.scopeWindows, scopeHolds: scopeChecks.scopeHolds, scopeCaps: scopeChecks.scopeCaps, chainHeads: chainChecks.chainHeads, chainStart: chainChecks.chainStart, receipt, receiptWithFacts, trustedKeys, heldReservation, unreceipted, idempotency, finish, stats }
}

/** The instants [start, end) of a period filter, for stores that select rows by time. */
export const scopeBounds = (period: string): { readonly startMillis: number; readonly endMillis: number } => periodBounds(period)
