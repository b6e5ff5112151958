/**
 * A raw Ed25519 thread of bench/verify.ts: given the export's public key and a sample of receipts'
 * signed bytes and signatures (workerData), checks the whole sample `passes` times each time it is
 * asked, with the implementation `tollgate verify`'s workers use (src/store/sodium.ts: libsodium
 * where it loads), and answers how many signatures verified. Nothing else per signature.
 */
import { createPublicKey } from "node:crypto"
import { parentPort, workerData } from "node:worker_threads"
import type { RawCheck } from "../../spec/ed25519.ts"
import { fastestEd25519 } from "../../src/store/sodium.ts"

const { publicKey, sample } = workerData as { publicKey: string; sample: ReadonlyArray<{ bytes: Uint8Array; sig: Uint8Array }> }
const check = fastestEd25519().checkFor(createPublicKey(publicKey)) as RawCheck
parentPort!.on("message", (passes: number) => {
  let ok = 0
  for (let p = 0; p < passes; p++) for (const s of sample) if (check(s.bytes, s.sig)) ok++
  parentPort!.postMessage(ok)
})
parentPort!.postMessage("ready")
