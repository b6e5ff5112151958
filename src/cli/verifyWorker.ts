/**
 * A signature worker of `tollgate verify --jobs N` (src/cli/verify.ts): given the trusted keys and a
 * batch of receipt lines, answers each line's seal verdict (spec/verify.ts `sealOfLine`, libsodium
 * where it loads), so the main thread's chain, Merkle and charge checks overlap the Ed25519 checks.
 * The verdicts are exactly the main thread's own (the same function on the same line and keys); the
 * main thread sends the four members the seal reads with each line, so a stored line is not parsed
 * twice (spec/verify.ts `sealOfText`).
 */
import { parentPort } from "node:worker_threads"
import type { Receipt } from "../../spec/receipt.ts"
import { sealKeys, sealOfText, type SealVerdict, type TrustedKeyInput } from "../../spec/verify.ts"
import { fastestCheckOfPem } from "./pemCheck.ts"

/** A line's members the seal needs, as the main thread parsed them: hash, signature, created_at, signing_key_id. */
export const SEAL_MEMBERS = 4

export interface SealJob {
  readonly id: number
  /** Present when the keys changed since the last batch. */
  readonly keys?: ReadonlyArray<TrustedKeyInput>
  readonly lines: ReadonlyArray<string>
  /** SEAL_MEMBERS strings a line, in the lines' order: the line is parsed again here only when it is not in the stored form. */
  readonly members: ReadonlyArray<string>
}

let keys = sealKeys([], fastestCheckOfPem)

parentPort!.on("message", (job: SealJob) => {
  if (job.keys !== undefined) keys = sealKeys(job.keys, fastestCheckOfPem)
  const m = job.members
  const verdicts: Array<SealVerdict> = job.lines.map((text, i) => {
    const at = i * SEAL_MEMBERS
    return sealOfText({ hash: m[at]!, signature: m[at + 1]!, created_at: m[at + 2]! }, text, keys.get(m[at + 3]!), () => JSON.parse(text) as Receipt)
  })
  parentPort!.postMessage({ id: job.id, verdicts })
})
