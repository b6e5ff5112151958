/**
 * The customer's verifier (DESIGN §11, issue 43): given a receipt export (spec/export.ts) and,
 * optionally, the checkpoints and statements a customer kept and the keys it trusts, report every
 * way the export departs from the rules — as findings in `tollgate audit`'s vocabulary
 * (spec/audit/findings.ts), so the two read alike. Pure: records in, findings out, no I/O; the same
 * code runs in `tollgate verify` (src/cli/verify.ts), in a browser and from the packed package.
 *
 * What it checks, reading the export once, in order, in flat memory (one chain position, one compact
 * Merkle range, one accumulator per statement; nothing grows with the receipts):
 *   - each receipt's seal: its signed text hashes to `hash` and the Ed25519 signature verifies under
 *     its key, a key whose id is derived from it (rk_ + SHA-256 of its PEM), used before its retirement;
 *   - the chain: seq ascending by one from 1, each `prev_hash` the hash of the receipt before
 *     (GENESIS_HASH first); a period export is a subsequence of the chain, so there only the links
 *     between consecutive seqs are checked;
 *   - each charge recomputed from its token counts and the rate card it names (the export's header
 *     carries the cards, `rate_cards`), within its reservation;
 *   - each checkpoint given (a signed note, spec/checkpoint.ts, signed by a trusted key): the tree
 *     head of the export's first `tree size` receipts is its root — a receipt changed, removed,
 *     inserted or reordered before that size, or another history of the same size, changes it; two
 *     checkpoints of one size with different roots are a split view; a checkpoint beyond the export's
 *     end means the export lost receipts the log had signed. Two checkpoints that both match one
 *     export are consistent (both are prefixes of its leaves), so consistency needs no proof here;
 *   - each statement (spec/statement.ts): its signature, its checkpoint (as above), and its totals
 *     against the sums of its period's receipts in the export.
 * Merkle checks need the whole chain (an export with no period, from its first page); on a period
 * export, or one that starts mid-chain, they are skipped and said so in `notes`.
 */
import { findingKinds as auditFindingKinds } from "./audit/findings.ts"
import { type Checkpoint, type NoteVerifier, noteVerifier, openCheckpoint, originOf, parseCheckpoint } from "./checkpoint.ts"
import { checkOfPem, rawOfSpkiPem, type RawCheck, receiptKeyIdOfPem } from "./ed25519.ts"
import type { ExportKey, ExportRecord } from "./export.ts"
import { CompactRange, equalHashes, receiptLeafHash } from "./merkle.ts"
import { fromBase64Any, sha256Hex, toBase64, utf8 } from "./platform.ts"
import { type RateCard, settlementCharge } from "./pricing.ts"
import { GENESIS_HASH, type Receipt, receiptBytes, signedTextOfStored, unsignedPart } from "./receipt.ts"
import { type Statement, statementProblem, statementSignedBytes, totalsDifferences, TotalsAccumulator } from "./statement.ts"

/** Every kind of finding of the verifier, with what it means; the audit's words where the audit has the kind. */
export const verifyFindingKinds = {
  export_malformed: "a line of the export is not a page header or a receipt in its served shape (subject: line number)",
  receipt_hash_mismatch: auditFindingKinds.receipt_hash_mismatch,
  signature_invalid: auditFindingKinds.signature_invalid,
  signing_key_unknown: "the receipt names a signing key that is not among the trusted public keys (the export's, or --keys) (subject: receipt id)",
  signing_key_retired: auditFindingKinds.signing_key_retired,
  signing_key_invalid: "a public key is unreadable or its id is not derived from it (subject: key id)",
  chain_order: "the receipt's seq is not after the one before it: receipts were reordered (subject: receipt id)",
  chain_gap: auditFindingKinds.chain_gap,
  chain_broken: auditFindingKinds.chain_broken,
  charge_mismatch: auditFindingKinds.charge_mismatch,
  charge_exceeds_reservation: auditFindingKinds.charge_exceeds_reservation,
  rate_card_missing: "a receipt names a rate card, or a route of a card, that the export does not carry (subject: rate card version)",
  checkpoint_invalid: "a checkpoint is not a signed note of this project's log signed by a trusted key (subject: checkpoint)",
  checkpoint_mismatch: "the tree head of the export's first N receipts is not the root a signed checkpoint of size N states: the log was changed, or shown differently (subject: checkpoint)",
  checkpoint_conflict: "two signed checkpoints of the same size state different roots: two histories of one log (subject: tree size)",
  export_truncated: "a signed checkpoint covers more receipts than the export holds: receipts the log signed are missing at its end (subject: checkpoint)",
  statement_invalid: "a statement is malformed, of another project, or its signature does not verify under a trusted key (subject: period)",
  statement_mismatch: "a statement's figure differs from the sum of its period's receipts in the export (subject: period/field)"
} as const

export type VerifyFindingKind = keyof typeof verifyFindingKinds

export interface VerifyFinding {
  readonly kind: VerifyFindingKind
  readonly subject: string
  readonly message: string
  readonly detail?: Readonly<Record<string, unknown>> | undefined
}

export interface TrustedKeyInput {
  readonly id: string
  readonly public_key: string
  readonly retired_at?: string | null | undefined
}

export interface VerifyOptions {
  /** Where each finding goes, as it is found. */
  readonly report: (finding: VerifyFinding) => void
  /** Keys the customer pins (GET /v1/receipts/keys as it saw them); absent: the export's own keys are trusted. */
  readonly keys?: ReadonlyArray<TrustedKeyInput> | undefined
  /** Signed checkpoint notes the customer kept. */
  readonly checkpoints?: ReadonlyArray<string> | undefined
  /** Statements (parsed JSON) the customer kept. */
  readonly statements?: ReadonlyArray<unknown> | undefined
  /** Rate cards the customer holds already (GET /v1/rate_cards); the export's headers add theirs. */
  readonly rateCards?: ReadonlyArray<RateCard> | undefined
  /** The Ed25519 check of a PEM public key (default: this build's, spec/platform.ts; the CLI passes libsodium's). */
  readonly checkOfPem?: ((pem: string) => RawCheck | undefined) | undefined
}

export interface VerifySummary {
  readonly project: string | undefined
  readonly period: string | null | undefined
  readonly receipts: number
  readonly pages: number
  readonly keys: number
  readonly rateCards: number
  readonly checkpoints: number
  readonly statements: number
  readonly findings: number
  readonly byKind: Readonly<Partial<Record<VerifyFindingKind, number>>>
  /** Checks that could not run on this input, and why. */
  readonly notes: ReadonlyArray<string>
  readonly clean: boolean
}

export interface Verifier {
  /**
   * One record of the export, in file order (spec/export.ts `ExportReader`). `verdict`: a receipt's
   * seal when already computed elsewhere (`sealOfLine` in a worker, with the keys of `trustedKeys`).
   */
  readonly record: (r: ExportRecord, verdict?: SealVerdict) => void
  readonly finish: () => VerifySummary
  /** The keys known so far, as plain data for a worker's `sealKeys` (an invalid one with no PEM). */
  readonly trustedKeys: () => ReadonlyArray<TrustedKeyInput>
}

interface Key {
  readonly check: RawCheck | undefined
  readonly retiredAt: number | null
  readonly raw: Uint8Array | undefined
}

/** A receipt's seal: intact, or which check fails first. */
export type SealVerdict = "intact" | "hash" | "signature" | "unknownKey" | "retired"

/** The checks of trusted keys (what a worker builds from `Verifier.trustedKeys`). */
export const sealKeys = (keys: ReadonlyArray<TrustedKeyInput>, checkOf: (pem: string) => RawCheck | undefined = checkOfPem): Map<string, Pick<Key, "check" | "retiredAt">> =>
  new Map(keys.map((k) => [k.id, { check: checkOf(k.public_key), retiredAt: k.retired_at === null || k.retired_at === undefined ? null : Date.parse(k.retired_at) }]))

/**
 * The seal of a receipt served as the export line `text`, under its key (undefined: not trusted).
 * The line as stored (canonical, spec/receipt.ts `SealedReceipt`): its signed text is the line
 * without `hash` and `signature` (the audit's `sealOfStored` argument); else it is written again.
 */
export const sealOfLine = (r: Receipt, text: string, key: Pick<Key, "check" | "retiredAt"> | undefined): SealVerdict => sealOfText(r, text, key, () => r)

/** What a receipt's seal is checked by, besides its line: four of its members. */
export type SealFields = Pick<Receipt, "hash" | "signature" | "created_at">

/**
 * `sealOfLine` given the receipt's `hash`, `signature` and `created_at` and, only when the line is
 * not in the stored form (or does not verify as it), the whole receipt (`receipt()`, the line parsed):
 * the same verdict, without parsing a stored line again where it was parsed already (a signature
 * worker of `tollgate verify` is sent these members with the line).
 */
export const sealOfText = (r: SealFields, text: string, key: Pick<Key, "check" | "retiredAt"> | undefined, receipt: () => Receipt): SealVerdict => {
  const signature = fromBase64Any(r.signature)
  const retired = (k: Pick<Key, "retiredAt">) => k.retiredAt !== null && Date.parse(r.created_at) > k.retiredAt
  const cut = signedTextOfStored(text, r.hash, r.signature)
  if (cut !== undefined && key?.check !== undefined) {
    const bytes = utf8(cut)
    if (sha256Hex(bytes) === r.hash && key.check(bytes, signature)) return retired(key) ? "retired" : "intact"
  }
  const bytes = receiptBytes(unsignedPart(receipt()))
  if (sha256Hex(bytes) !== r.hash) return "hash"
  if (key === undefined) return "unknownKey"
  if (key.check === undefined || !key.check(bytes, signature)) return "signature"
  return retired(key) ? "retired" : "intact"
}

interface KeptCheckpoint {
  /** How the finding names it: "checkpoint 3 (size 120)" or "statement 2026-11". */
  readonly label: string
  readonly note: string
  /** As written, before its signature is checked: what to record the export's root at. */
  readonly claimed: Checkpoint | undefined
}

/** The signature lines' key names of a note (C2SP signed-note), to build a verifier of each trusted key under each name. */
const signatureNames = (note: string): Array<string> => {
  const names = new Set<string>()
  for (const line of note.split("\n")) if (line.startsWith("\u2014 ")) names.add(line.slice(2, Math.max(2, line.indexOf(" ", 2))))
  return [...names].filter((n) => n.length > 0)
}

/** The note text (before the blank line) of a signed note. */
const noteText = (note: string): string => {
  const at = note.lastIndexOf("\n\n")
  return at < 0 ? note : note.slice(0, at + 1)
}

/**
 * The signed notes of a file of them, one after another (each: text lines, a blank line, signature
 * lines; blank lines between notes are allowed), as a customer keeps GET /v1/receipts/checkpoint's answers.
 */
export const splitNotes = (text: string): Array<string> => {
  const notes: Array<string> = []
  let current: Array<string> = []
  let inSignatures = false
  const flush = () => {
    if (current.length > 0) notes.push(`${current.join("\n")}\n`)
    current = []
    inSignatures = false
  }
  for (const line of text.split("\n")) {
    if (inSignatures && !line.startsWith("\u2014 ")) flush()
    if (line === "") {
      if (current.length > 0) {
        current.push("")
        inSignatures = true
      }
      continue
    }
    current.push(line)
  }
  flush()
  return notes
}

export const makeVerifier = (options: VerifyOptions): Verifier => {
  const checkOf = options.checkOfPem ?? checkOfPem
  const byKind: Partial<Record<VerifyFindingKind, number>> = {}
  let findings = 0
  const report = (kind: VerifyFindingKind, subject: string, message: string, detail?: Record<string, unknown>) => {
    findings += 1
    byKind[kind] = (byKind[kind] ?? 0) + 1
    options.report({ kind, subject, message, detail })
  }
  const notes: Array<string> = []

  // Keys: pinned ones, else every page's.
  const keys = new Map<string, Key>()
  const trustedPems: Array<TrustedKeyInput> = []
  const addKey = (k: TrustedKeyInput) => {
    if (keys.has(k.id)) return
    const derived = receiptKeyIdOfPem(k.public_key)
    const raw = rawOfSpkiPem(k.public_key)
    if (derived !== k.id || raw === undefined) {
      report("signing_key_invalid", k.id, derived === undefined ? `key ${k.id} is not an Ed25519 public key in PEM form` : `key ${k.id} is not the id of its own key (${derived})`)
      keys.set(k.id, { check: undefined, retiredAt: null, raw: undefined })
      // Known but not trusted: no PEM, so a worker's check of it is none too (the same verdicts).
      trustedPems.push({ id: k.id, public_key: "", retired_at: null })
      return
    }
    const retiredAt = k.retired_at === null || k.retired_at === undefined ? null : Date.parse(k.retired_at)
    keys.set(k.id, { check: checkOf(k.public_key), retiredAt, raw })
    trustedPems.push({ id: k.id, public_key: k.public_key, retired_at: k.retired_at ?? null })
  }
  const pinned = options.keys !== undefined
  for (const k of options.keys ?? []) addKey(k)

  // Rate cards, from the export's headers.
  const cards = new Map<string, RateCard>((options.rateCards ?? []).map((c) => [c.version, c]))
  const missingCards = new Map<string, number>()

  // Checkpoints and statements kept.
  const kept: Array<KeptCheckpoint> = (options.checkpoints ?? []).map((note, i) => {
    const claimed = parseCheckpoint(noteText(note))
    const c = "malformed" in claimed ? undefined : claimed
    return { label: `checkpoint ${i + 1}${c === undefined ? "" : ` (size ${c.treeSize})`}`, note, claimed: c }
  })
  const statements: Array<{ readonly statement: Statement; readonly totals: TotalsAccumulator }> = []
  for (const [i, s] of (options.statements ?? []).entries()) {
    const problem = statementProblem(s)
    if (problem !== undefined) {
      report("statement_invalid", `statement ${i + 1}`, `statement ${i + 1} is malformed: ${problem}`)
      continue
    }
    const statement = s as Statement
    statements.push({ statement, totals: new TotalsAccumulator() })
    const claimed = parseCheckpoint(noteText(statement.checkpoint))
    kept.push({ label: `statement ${statement.period}`, note: statement.checkpoint, claimed: "malformed" in claimed ? undefined : claimed })
  }
  /** The export's root at each size a kept checkpoint claims, recorded as the leaves pass it. */
  const rootsAt = new Map<number, Uint8Array | undefined>()
  for (const k of kept) if (k.claimed !== undefined) rootsAt.set(k.claimed.treeSize, undefined)

  // The walk.
  let project: string | undefined
  let period: string | null | undefined
  let pages = 0
  let receipts = 0
  let wholeChain = true
  let maxSeq = 0
  let lastHash = GENESIS_HASH
  const tree = new CompactRange()
  if (rootsAt.has(0)) rootsAt.set(0, tree.root())

  const header = (h: Extract<ExportRecord, { kind: "header" }>["header"]) => {
    pages += 1
    if (pages === 1) {
      project = h.project_id
      period = h.period
      if (h.period !== null || h.cursor !== null) wholeChain = false
    }
    if (!pinned) for (const k of h.keys) addKey(k)
    for (const c of (h as { rate_cards?: ReadonlyArray<RateCard> }).rate_cards ?? []) if (!cards.has(c.version)) cards.set(c.version, c)
  }

  const seal = (r: Receipt, text: string): SealVerdict => sealOfLine(r, text, keys.get(r.signing_key_id))

  const receipt = (r: Receipt, text: string, verdict: SealVerdict | undefined) => {
    receipts += 1
    const id = r.receipt_id
    switch (verdict ?? seal(r, text)) {
      case "hash":
        report("receipt_hash_mismatch", id, `receipt ${id} (seq ${r.seq}) does not hash to its recorded hash: it was edited after sealing`)
        break
      case "unknownKey":
        report("signing_key_unknown", id, `receipt ${id} is signed by ${r.signing_key_id}, which is not a trusted key`)
        break
      case "signature":
        report("signature_invalid", id, `the signature of receipt ${id} (seq ${r.seq}) does not verify under ${r.signing_key_id}`)
        break
      case "retired":
        report("signing_key_retired", id, `receipt ${id} was created at ${r.created_at}, after ${r.signing_key_id} was retired`)
        break
      case "intact":
        break
    }

    // The chain.
    if (receipts === 1 && !wholeChain) {
      maxSeq = r.seq
      lastHash = r.hash
    } else if (r.seq <= maxSeq) {
      report("chain_order", id, `receipt ${id} has seq ${r.seq} after seq ${maxSeq}: receipts were reordered`, { seq: r.seq, after_seq: maxSeq })
    } else {
      if (r.seq > maxSeq + 1 && period === null) {
        report("chain_gap", id, `receipts ${maxSeq + 1}..${r.seq - 1} are missing before ${id}`, { missing_from_seq: maxSeq + 1, missing_to_seq: r.seq - 1 })
      } else if (r.seq === maxSeq + 1 && r.prev_hash !== lastHash) {
        report("chain_broken", id, `receipt ${id} (seq ${r.seq}) does not link to the receipt before it`, { prev_hash: r.prev_hash, expected_prev_hash: lastHash })
      }
      maxSeq = r.seq
      lastHash = r.hash
    }

    // The charge.
    const card = cards.get(r.rate_card_version)
    const prices = card?.prices[r.route]
    if (prices === undefined) {
      missingCards.set(r.rate_card_version, (missingCards.get(r.rate_card_version) ?? 0) + 1)
    } else {
      const { charge } = settlementCharge(r.tokens, prices, r.credits_reserved)
      if (charge !== r.credits_charged) {
        report("charge_mismatch", id, `receipt ${id} charges ${r.credits_charged} Credits; its tokens under ${r.rate_card_version} come to ${charge}`, {
          charged: r.credits_charged,
          recomputed: charge
        })
      }
    }
    if (r.credits_charged > r.credits_reserved) {
      report("charge_exceeds_reservation", id, `receipt ${id} charges ${r.credits_charged} Credits, more than the ${r.credits_reserved} reserved`)
    }

    // The log and the statements.
    if (wholeChain) {
      tree.append(receiptLeafHash(r.hash))
      if (rootsAt.has(tree.size)) rootsAt.set(tree.size, tree.root())
    }
    for (const s of statements) if (r.period === s.statement.period) s.totals.add(r)
  }

  const record = (rec: ExportRecord, verdict?: SealVerdict) => {
    if (rec.kind === "header") header(rec.header)
    else if (rec.kind === "receipt") receipt(rec.receipt, rec.text, verdict)
    else report("export_malformed", `line ${rec.line}`, `line ${rec.line}: ${rec.reason}`)
  }

  /** Verifiers of every trusted key under every name the note's signatures use (the key hash binds the two). */
  const verifiersFor = (note: string): Array<NoteVerifier> => {
    const out: Array<NoteVerifier> = []
    for (const name of signatureNames(note)) {
      for (const k of keys.values()) {
        if (k.raw === undefined) continue
        try {
          out.push(noteVerifier(name, k.raw))
        } catch {
          // Not a key name: such a signature line is refused by openCheckpoint itself.
        }
      }
    }
    return out
  }

  const finishCheckpoints = (origin: string) => {
    const rootsBySize = new Map<number, { root: Uint8Array; label: string }>()
    for (const k of kept) {
      const opened = openCheckpoint(k.note, verifiersFor(k.note), origin)
      if (opened._tag === "Refused") {
        report("checkpoint_invalid", k.label, `${k.label} is refused (${opened.reason}): ${opened.detail}`)
        continue
      }
      const cp = opened.checkpoint
      const seen = rootsBySize.get(cp.treeSize)
      if (seen !== undefined && !equalHashes(seen.root, cp.rootHash)) {
        report("checkpoint_conflict", `size ${cp.treeSize}`, `${seen.label} and ${k.label} are both signed for tree size ${cp.treeSize} with different roots: two histories of one log`, {
          roots: [toBase64(seen.root), toBase64(cp.rootHash)]
        })
      }
      if (seen === undefined) rootsBySize.set(cp.treeSize, { root: cp.rootHash, label: k.label })
      if (!wholeChain) continue
      if (cp.treeSize > tree.size) {
        report("export_truncated", k.label, `${k.label} signs a log of ${cp.treeSize} receipts; the export holds ${tree.size}`, { tree_size: cp.treeSize, receipts: tree.size })
        continue
      }
      const root = rootsAt.get(cp.treeSize)
      if (root === undefined || !equalHashes(root, cp.rootHash)) {
        report("checkpoint_mismatch", k.label, `the export's first ${cp.treeSize} receipts do not make the root ${k.label} signs`, {
          tree_size: cp.treeSize,
          signed_root: toBase64(cp.rootHash),
          export_root: root === undefined ? null : toBase64(root)
        })
      }
    }
  }

  const finishStatements = () => {
    for (const { statement: s, totals } of statements) {
      const subject = s.period
      if (project !== undefined && s.project_id !== project) {
        report("statement_invalid", subject, `the statement of ${s.period} is of project ${s.project_id}, not ${project}`)
        continue
      }
      const key = keys.get(s.signing_key_id)
      const signature = fromBase64Any(s.signature)
      if (key?.check === undefined || !key.check(statementSignedBytes(s), signature)) {
        report("statement_invalid", subject, `the signature of the statement of ${s.period} does not verify under ${s.signing_key_id}${key === undefined ? " (not a trusted key)" : ""}`)
      }
      if (period !== null && period !== undefined && period !== s.period) {
        notes.push(`the statement of ${s.period} was not summed: the export is of ${period}`)
        continue
      }
      for (const d of totalsDifferences(s, totals.totals())) {
        report("statement_mismatch", `${s.period}/${d.field}`, `the statement of ${s.period} states ${d.field} = ${d.statement}; its receipts in the export sum to ${d.receipts}`, {
          field: d.field,
          statement: d.statement,
          receipts: d.receipts
        })
      }
      if (s.spent > s.cap) report("statement_mismatch", `${s.period}/spent`, `the statement of ${s.period} states spent ${s.spent} over its cap ${s.cap}`)
    }
  }

  const finish = (): VerifySummary => {
    for (const [version, n] of missingCards) {
      report("rate_card_missing", version, `${n} receipt(s) name rate card ${version} (or a route it does not price), which the export does not carry: their charges were not recomputed`)
    }
    if (kept.length > 0 && !wholeChain) {
      notes.push(
        period !== null && period !== undefined
          ? `checkpoints were checked for their signatures only: an export of one period (${period}) is not the whole log; export with no period to check the roots`
          : "checkpoints were checked for their signatures only: the export starts mid-chain (its first page has a cursor)"
      )
    }
    if (project !== undefined) finishCheckpoints(originOf(project))
    else if (kept.length > 0) notes.push("no page header: checkpoints and statements were not checked")
    if (project !== undefined) finishStatements()
    return {
      project,
      period,
      receipts,
      pages,
      keys: keys.size,
      rateCards: cards.size,
      checkpoints: kept.length,
      statements: statements.length,
      findings,
      byKind,
      notes,
      clean: findings === 0
    }
  }

  const trustedKeys = (): Array<TrustedKeyInput> => [...trustedPems]

  return { record, finish, trustedKeys }
}

/** The findings and summary of a whole export held in memory (a browser's, a test's). */
export const verifyRecords = (
  records: Iterable<ExportRecord>,
  options: Omit<VerifyOptions, "report">
): { readonly findings: ReadonlyArray<VerifyFinding>; readonly summary: VerifySummary } => {
  const findings: Array<VerifyFinding> = []
  const v = makeVerifier({ ...options, report: (f) => findings.push(f) })
  for (const r of records) v.record(r)
  return { findings, summary: v.finish() }
}

export type { ExportKey }
/** A rate card as GET /v1/rate_cards lists it. */
export type RateCardInput = RateCard
