/**
 * A signature worker of `tollgate audit` (src/store/auditPool.ts starts them): receives batches of
 * stored receipt bodies and answers one seal verdict per body (spec/audit/seal.ts: parse, canonical
 * form, SHA-256, Ed25519 verify, key trust) as a byte array, in the batch's order. Pure work, no
 * store, no findings of its own: the main thread keeps the chain and window checks, in order.
 *
 * Lean on purpose: it imports node:crypto, node:worker_threads and spec/ only, never Effect or the
 * app (test/audit/worker.test.ts checks its import graph).
 */
import { parentPort, workerData } from "node:worker_threads"
import { sealOfBody, trustedKeyMap, type TrustedKeyData } from "../../spec/audit/seal.ts"

export interface AuditWorkerData {
  readonly keys: ReadonlyArray<TrustedKeyData>
}

export interface SealRequest {
  readonly id: number
  readonly bodies: ReadonlyArray<string>
}

export interface SealReply {
  readonly id: number
  readonly codes: Uint8Array
}

const trusted = trustedKeyMap((workerData as AuditWorkerData).keys)

parentPort?.on("message", (req: SealRequest) => {
  const codes = new Uint8Array(req.bodies.length)
  for (let i = 0; i < req.bodies.length; i++) codes[i] = sealOfBody(req.bodies[i]!, trusted)
  parentPort!.postMessage({ id: req.id, codes } satisfies SealReply, [codes.buffer])
})
