/**
 * `npx tsx bench/verifyParts.ts [--receipts 20000]`: what `tollgate verify` spends a receipt on, part by
 * part, on one thread: each step of the walk (spec/export.ts, spec/verify.ts) timed alone over the
 * same receipts of a generated export (test/verify/exportFixture.ts), next to the Ed25519 check
 * itself. Where the time beside the signature goes (issue 43: verify at ≥ 80% of the Ed25519 rate).
 * A benchmark: printed, never asserted.
 */
import { createPublicKey } from "node:crypto"
import { MessageChannel, receiveMessageOnPort } from "node:worker_threads"
import { ExportReader, LineSplitter } from "../spec/export.ts"
import { CompactRange, receiptLeafHash } from "../spec/merkle.ts"
import { settlementCharge } from "../spec/pricing.ts"
import { type Receipt, receiptBytes, unsignedPart } from "../spec/receipt.ts"
import { TotalsAccumulator } from "../spec/statement.ts"
import { makeVerifier, sealKeys, sealOfLine } from "../spec/verify.ts"
import { fastestCheckOfPem } from "../src/cli/pemCheck.ts"
import { fastestEd25519 } from "../src/store/sodium.ts"
import { fromBase64Any, type RawCheck, sha256Hex, utf8 } from "../spec/platform.ts"
import { chainBodies, exportHeader, makeKey, RATE_CARD } from "../test/verify/exportFixture.ts"
import { numArg } from "./lib/args.ts"

const n = numArg("--receipts", 20_000)
const key = makeKey()
const lines: Array<string> = []
for (const c of chainBodies({ key, count: n })) lines.push(c.body)
const header = exportHeader(key)
const text = `${header}\n${lines.join("\n")}\n`
const parsed = lines.map((l) => JSON.parse(l) as Receipt)
const check = fastestEd25519().checkFor(createPublicKey(key.entry.public_key)) as RawCheck
const keys = sealKeys([key.entry], fastestCheckOfPem)
const k = keys.get(key.entry.id)!
const signed = parsed.map((r) => ({ bytes: receiptBytes(unsignedPart(r)), sig: fromBase64Any(r.signature) }))

/** µs a receipt of `f` over every receipt, best of 3 (CPU time of this thread). */
const time = (label: string, f: () => void) => {
  let best = Infinity
  for (let round = 0; round < 3; round++) {
    const c0 = process.cpuUsage()
    f()
    const c = process.cpuUsage(c0)
    best = Math.min(best, (c.user + c.system) / n)
  }
  rows.push([label, best])
}
const rows: Array<[string, number]> = []
let sink = 0
time("Ed25519 verify (libsodium), nothing else", () => {
  for (const s of signed) if (check(s.bytes, s.sig)) sink++
})
time("line splitting (LineSplitter over the whole text)", () => {
  const sp = new LineSplitter()
  for (const l of sp.push(text)) sink += l.length
})
time("JSON.parse of the line", () => {
  for (const l of lines) sink += (JSON.parse(l) as Receipt).seq
})
time("ExportReader.read (parse + shape checks)", () => {
  const reader = new ExportReader()
  reader.read(header)
  for (const l of lines) sink += reader.read(l).line
})
time("sealOfLine (signed text cut, UTF-8, SHA-256, Ed25519)", () => {
  for (let i = 0; i < n; i++) if (sealOfLine(parsed[i]!, lines[i]!, k) === "intact") sink++
})
time("— of which the SHA-256 of the signed text", () => {
  for (const s of signed) sink += sha256Hex(s.bytes).length
})
time("— of which UTF-8 of the line", () => {
  for (const l of lines) sink += utf8(l).length
})
time("leaf hash + CompactRange.append", () => {
  const tree = new CompactRange()
  for (const r of parsed) tree.append(receiptLeafHash(r.hash))
  sink += tree.size
})
time("charge recomputed", () => {
  for (const r of parsed) sink += settlementCharge(r.tokens, RATE_CARD.prices[r.route]!, r.credits_reserved).charge
})
time("statement totals", () => {
  const t = new TotalsAccumulator()
  for (const r of parsed) t.add(r)
})
time("verifier.record with the seal given (chain, charge, Merkle, totals)", () => {
  const v = makeVerifier({ report: () => {}, checkOfPem: fastestCheckOfPem })
  const reader = new ExportReader()
  v.record(reader.read(header))
  for (const l of lines) v.record(reader.read(l), "intact")
})
time("hand-off: a batch of 256 lines posted and received (structured clone)", () => {
  const { port1, port2 } = new MessageChannel()
  for (let i = 0; i < n; i += 256) {
    port1.postMessage({ id: i, lines: lines.slice(i, i + 256) })
    sink += (receiveMessageOnPort(port2)!.message as { lines: Array<string> }).lines.length
  }
  port1.close()
})
console.log(`${n} receipts, ${(text.length / n).toFixed(0)} bytes a line; CPU µs a receipt, best of 3 (sink ${sink % 10}):`)
for (const [label, us] of rows) console.log(`  ${us.toFixed(2).padStart(7)}  ${label}`)
