/**
 * `tollgate verify-receipt <receipt.json>`: check one exported receipt (GET /v1/requests/{id}/receipt)
 * offline, with the rules of spec/receipt.ts and spec/pricing.ts.
 *
 *   tollgate verify-receipt receipt.json --public-key key.pem          a key you hold
 *   tollgate verify-receipt receipt.json --url http://localhost:8080   fetch GET /v1/receipts/keys
 *     [--prev previous.json]   also check the chain link to the receipt before it
 *     [--rate-card card.json]  also recompute the charge ({version, effective_from, prices}, or a list)
 *     [--json]
 *
 * Exit code: 0 the receipt verifies, 1 it does not, 2 the check could not run.
 */
import { readFileSync } from "node:fs"
import { oneFileCommand } from "./commandText.ts"
import { parseReceipt, receiptKeyId } from "../../spec/audit.ts"
import { type Prices, type RateCard, settledCharge } from "../../spec/pricing.ts"
import { GENESIS_HASH, verifyReceipt } from "../../spec/receipt.ts"

export interface ReceiptVerdict {
  readonly receipt_id: string | null
  readonly valid: boolean
  /** Each check run, with whether it passed and why not. */
  readonly checks: ReadonlyArray<{ readonly check: string; readonly ok: boolean; readonly detail?: string | undefined }>
}

interface PublishedKey {
  readonly id: string
  readonly public_key: string
  readonly retired_at?: string | null
}

/** Verify one receipt given the candidate public keys (pinned, or as published with their ids). */
export const verifyReceiptWith = (
  raw: string,
  keys: ReadonlyArray<PublishedKey>,
  options: { readonly prev?: string | undefined; readonly rateCards?: ReadonlyArray<RateCard> | undefined } = {}
): ReceiptVerdict => {
  const checks: Array<{ check: string; ok: boolean; detail?: string | undefined }> = []
  const receipt = parseReceipt(raw)
  if (typeof receipt === "string") return { receipt_id: null, valid: false, checks: [{ check: "format", ok: false, detail: receipt }] }
  checks.push({ check: "format", ok: true })

  // A published key counts only if its id is derived from it: the id in the receipt then pins the key.
  const key = keys.find((k) => k.id === receipt.signing_key_id && safeId(k.public_key) === k.id)
  if (key === undefined) {
    checks.push({ check: "key", ok: false, detail: `no public key with id ${receipt.signing_key_id}` })
  } else {
    checks.push({ check: "key", ok: true, detail: key.retired_at ? `${key.id} (retired ${key.retired_at})` : key.id })
    const failed = verifyReceipt(receipt, key.public_key)
    checks.push({ check: "hash", ok: !failed.includes("hash"), detail: failed.includes("hash") ? "the content does not hash to `hash`" : undefined })
    checks.push({ check: "signature", ok: !failed.includes("signature"), detail: failed.includes("signature") ? `not signed by ${key.id}` : undefined })
    if (key.retired_at && Date.parse(receipt.created_at) > Date.parse(key.retired_at)) {
      checks.push({ check: "key_validity", ok: false, detail: `created ${receipt.created_at}, after ${key.id} was retired` })
    }
  }
  checks.push({
    check: "charge_within_reservation",
    ok: receipt.credits_charged <= receipt.credits_reserved,
    detail: receipt.credits_charged <= receipt.credits_reserved ? undefined : `${receipt.credits_charged} > ${receipt.credits_reserved}`
  })
  if (options.prev !== undefined) {
    const prev = parseReceipt(options.prev)
    if (typeof prev === "string") checks.push({ check: "chain", ok: false, detail: `--prev: ${prev}` })
    else {
      const ok = prev.project_id === receipt.project_id && prev.seq + 1 === receipt.seq && prev.hash === receipt.prev_hash
      checks.push({ check: "chain", ok, detail: ok ? undefined : `does not follow ${prev.receipt_id} (seq ${prev.seq})` })
    }
  } else if (receipt.seq === 1) {
    const ok = receipt.prev_hash === GENESIS_HASH
    checks.push({ check: "chain", ok, detail: ok ? "first of its chain" : "seq 1 must link to the genesis hash" })
  }
  if (options.rateCards !== undefined) {
    const card = options.rateCards.find((c) => c.version === receipt.rate_card_version)
    const prices: Prices | undefined = card?.prices[receipt.route]
    if (prices === undefined) checks.push({ check: "charge", ok: false, detail: `no prices for ${receipt.route} in ${receipt.rate_card_version}` })
    else {
      const expected = settledCharge(receipt.tokens, prices, receipt.credits_reserved)
      checks.push({
        check: "charge",
        ok: expected === receipt.credits_charged,
        detail: expected === receipt.credits_charged ? undefined : `recomputed ${expected}, receipt says ${receipt.credits_charged}`
      })
    }
  }
  return { receipt_id: receipt.receipt_id, valid: checks.every((c) => c.ok), checks }
}

const safeId = (pem: string): string | undefined => {
  try {
    return receiptKeyId(pem)
  } catch {
    return undefined
  }
}

const usage = `usage: tollgate verify-receipt <receipt.json> (--public-key key.pem | --url http://host:port)
                               [--prev previous.json] [--rate-card card.json] [--json]
  --url defaults to TOLLGATE_URL when neither is given
exit code: 0 valid, 1 invalid, 2 the check could not run`

const fetchKeys = async (base: string): Promise<ReadonlyArray<PublishedKey>> => {
  const res = await fetch(`${base.replace(/\/+$/, "").replace(/\/v1$/, "")}/v1/receipts/keys`)
  if (!res.ok) throw new Error(`GET /v1/receipts/keys answered ${res.status}`)
  const body = (await res.json()) as { data?: ReadonlyArray<PublishedKey> }
  if (!Array.isArray(body.data)) throw new Error("GET /v1/receipts/keys: no data list")
  return body.data
}

export const verifyReceiptCommand = async (argv: ReadonlyArray<string>): Promise<number> => {
  const parsed = oneFileCommand(
    argv,
    {
      "public-key": { type: "string", multiple: true },
      url: { type: "string" },
      prev: { type: "string" },
      "rate-card": { type: "string" },
      json: { type: "boolean" }
    },
    usage
  )
  if (typeof parsed === "number") return parsed
  const { values, file } = parsed
  try {
    const raw = readFileSync(file, "utf8")
    const pems = (values["public-key"] ?? []).map((p) => readFileSync(p, "utf8"))
    const url = values.url ?? (pems.length === 0 ? process.env["TOLLGATE_URL"] : undefined)
    if (pems.length === 0 && url === undefined) {
      process.stderr.write(`give --public-key or --url\n${usage}\n`)
      return 2
    }
    const keys: Array<PublishedKey> = pems.flatMap((pem) => {
      const id = safeId(pem)
      if (id === undefined) throw new Error("--public-key: not a readable public key")
      return [{ id, public_key: pem }]
    })
    if (url !== undefined) keys.push(...(await fetchKeys(url)))
    let rateCards: ReadonlyArray<RateCard> | undefined
    if (values["rate-card"] !== undefined) {
      const card = JSON.parse(readFileSync(values["rate-card"], "utf8")) as RateCard | ReadonlyArray<RateCard> | { rate_cards: ReadonlyArray<RateCard> }
      rateCards = Array.isArray(card) ? card : "rate_cards" in (card as object) ? (card as { rate_cards: ReadonlyArray<RateCard> }).rate_cards : [card as RateCard]
    }
    const verdict = verifyReceiptWith(raw, keys, {
      prev: values.prev === undefined ? undefined : readFileSync(values.prev, "utf8"),
      rateCards
    })
    if (values.json === true) process.stdout.write(`${JSON.stringify(verdict)}\n`)
    else {
      const lines = [`${verdict.valid ? "VALID" : "INVALID"}: receipt ${verdict.receipt_id ?? "(unreadable)"}`]
      for (const c of verdict.checks) lines.push(`  ${c.ok ? "ok  " : "FAIL"} ${c.check}${c.detail === undefined ? "" : `: ${c.detail}`}`)
      process.stdout.write(`${lines.join("\n")}\n`)
    }
    return verdict.valid ? 0 : 1
  } catch (e) {
    process.stderr.write(`tollgate verify-receipt: ${(e as Error).message}\n`)
    return 2
  }
}

