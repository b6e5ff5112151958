/**
 * The dashboard's checks run the package @tollgate/spec itself (its browser build: SHA-256 and Ed25519
 * in pure JavaScript, @noble/hashes and @noble/ed25519), the same rules the gateway seals by and
 * `tollgate verify` checks by; nothing here restates them.
 *   - one receipt: its hash and signature under the published key whose id it names (docs/receipts.md);
 *   - a month's export (GET /admin/v1/projects/{id}/receipts?period=…): every receipt's seal, the chain
 *     links, every charge recomputed from the rate cards the export carries, as `tollgate verify` does.
 *     With a statement of the month, its signature and its totals against the receipts' sums.
 *     A card the export does not carry (rate_card_missing) is shown as a check not made, not as a
 *     fault: the session cannot read GET /v1/rate_cards (a project key's route).
 */
import { Ed25519, Export, Receipt as Rules, Verify } from "@tollgate/spec"
import type { PublicKey, Receipt } from "./api.ts"

export interface Verdict {
  readonly hash: boolean
  readonly signature: boolean
  readonly keyFound: boolean
  /** Which implementation checked the signature. */
  readonly engine: string
}

const ENGINE = "@tollgate/spec"

export const verifyReceipt = (receipt: Receipt, keys: ReadonlyArray<PublicKey>): Verdict => {
  // A published key counts only if its id is derived from it: the id in the receipt then pins the key.
  const key = keys.find((k) => k.id === receipt.signing_key_id && Ed25519.receiptKeyIdOfPem(k.public_key) === k.id)
  const failed = Rules.verifyReceipt(receipt as unknown as Rules.Receipt, key?.public_key ?? "")
  return { hash: !failed.includes("hash"), signature: key !== undefined && !failed.includes("signature"), keyFound: key !== undefined, engine: ENGINE }
}

export interface ExportVerdict {
  readonly summary: Verify.VerifySummary
  /** Every finding but rate_card_missing. */
  readonly findings: ReadonlyArray<Verify.VerifyFinding>
  /** Checks not made, and why. */
  readonly unchecked: ReadonlyArray<string>
}

/** `tollgate verify`'s checks on an export's text (and the statements given: their signatures and totals), in this browser. */
export const verifyExport = (text: string, statements: ReadonlyArray<unknown> = []): ExportVerdict => {
  const { summary, findings } = Verify.verifyRecords(Export.readExport(text), { statements })
  const missing = findings.filter((f) => f.kind === "rate_card_missing")
  return {
    summary,
    findings: findings.filter((f) => f.kind !== "rate_card_missing"),
    unchecked: [...summary.notes, ...missing.map((f) => `Charges not recomputed: ${f.message}.`)]
  }
}

export const describeFinding = (kind: Verify.VerifyFindingKind): string => Verify.verifyFindingKinds[kind]
