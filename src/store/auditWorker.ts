/**
 * A signature worker of `tollgate audit` (src/store/auditPool.ts starts them): receives batches of
 * receipts and answers, in the batch's order, either one seal verdict per stored body (spec/audit/
 * seal.ts: parse, canonical form, SHA-256, Ed25519 verify, key trust) as a byte array, or, given the
 * rows' signed columns, the facts of each receipt (spec/audit/facts.ts: seal and column checks, and
 * the few signed numbers the ordered checks need) as a transferred Float64Array. Pure work, no store,
 * no findings of its own: the main thread keeps the chain and window checks, in order.
 *
 * Lean on purpose: it imports node: modules and spec/ only, never Effect or the app
 * (test/audit/jobs.test.ts checks its import graph); libsodium's binding is loaded by the path the
 * main thread resolved.
 */
import { parentPort, workerData } from "node:worker_threads"
import { batchFacts, type BatchFacts, type ColumnBatch } from "../../spec/audit/facts.ts"
import { ed25519At } from "./ed25519Native.ts"
import { type SealCode, sealOfBody, trustedKeyMap, type TrustedKeyData } from "../../spec/audit/seal.ts"

export interface AuditWorkerData {
  readonly keys: ReadonlyArray<TrustedKeyData>
  /** The resolved `sodium-native` entry when the main thread checks with libsodium (spec/ed25519.ts). */
  readonly sodium: string | undefined
}

export type SealRequest =
  | { readonly id: number; readonly bodies: ReadonlyArray<string> }
  | { readonly id: number; readonly rows: ColumnBatch }

/** One seal verdict a byte. */
export type SealCodes = Uint8Array<ArrayBuffer> & ArrayLike<SealCode>

export type SealReply = { readonly id: number; readonly codes: SealCodes } | { readonly id: number; readonly facts: BatchFacts }

const { keys, sodium } = workerData as AuditWorkerData
// The main thread's implementation; should the binding fail to load here, node:crypto gives the same verdicts.
const trusted = trustedKeyMap(keys, ed25519At(sodium))

parentPort?.on("message", (req: SealRequest) => {
  if ("rows" in req) {
    const facts = batchFacts(req.rows, trusted)
    parentPort!.postMessage({ id: req.id, facts } satisfies SealReply, [facts.numbers.buffer as ArrayBuffer])
    return
  }
  // Every byte is set to a SealCode below.
  const codes = new Uint8Array(req.bodies.length) as SealCodes
  for (let i = 0; i < req.bodies.length; i++) codes[i] = sealOfBody(req.bodies[i]!, trusted)
  parentPort!.postMessage({ id: req.id, codes } satisfies SealReply, [codes.buffer])
})
