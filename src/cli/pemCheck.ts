/** The Ed25519 check of a PEM public key by this thread's fastest implementation (libsodium where it loads), for `tollgate verify` and its workers. */
import { createPublicKey } from "node:crypto"
import type { RawCheck } from "../../spec/ed25519.ts"
import { fastestEd25519 } from "../store/sodium.ts"

export const fastestCheckOfPem = (pem: string): RawCheck | undefined => {
  try {
    return fastestEd25519().checkFor(createPublicKey(pem)) as RawCheck
  } catch {
    return undefined
  }
}
