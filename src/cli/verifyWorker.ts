/**
 * A signature worker of `tollgate verify --jobs N` (src/cli/verify.ts): given the trusted keys and a
 * batch of receipt lines, answers each line's seal verdict (spec/verify.ts `sealOfLine`, libsodium
 * where it loads), so the main thread's chain, Merkle and charge checks overlap the Ed25519 checks.
 * The verdicts are exactly the main thread's own (the same function on the same line and keys).
 */
import { parentPort } from "node:worker_threads"
import type { Receipt } from "../../spec/receipt.ts"
import { sealKeys, sealOfLine, type SealVerdict, type TrustedKeyInput } from "../../spec/verify.ts"
import { fastestCheckOfPem } from "./pemCheck.ts"

export interface SealJob {
  readonly id: number
  /** Present when the keys changed since the last batch. */
  readonly keys?: ReadonlyArray<TrustedKeyInput>
  readonly lines: ReadonlyArray<string>
}

let keys = sealKeys([], fastestCheckOfPem)

parentPort!.on("message", (job: SealJob) => {
  if (job.keys !== undefined) keys = sealKeys(job.keys, fastestCheckOfPem)
  const verdicts: Array<SealVerdict> = job.lines.map((text) => {
    const r = JSON.parse(text) as Receipt
    return sealOfLine(r, text, keys.get(r.signing_key_id))
  })
  parentPort!.postMessage({ id: job.id, verdicts })
})
