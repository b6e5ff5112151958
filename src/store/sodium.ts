/**
 * libsodium's Ed25519 (the interface is spec/ed25519.ts's), found and loaded from here: the resolved
 * entry of `sodium-native`, which the threads that run bundled code (the store worker, the audit's
 * workers) are given, since they cannot resolve a package themselves; and the implementation this
 * thread signs and checks with. The binding is loaded from that path by ./ed25519Native.ts (which the
 * workers import alone); spec/ loads nothing native.
 */
import type { KeyObject } from "node:crypto"
import { createRequire } from "node:module"
import type { Ed25519 } from "../../spec/ed25519.ts"
import { ed25519At } from "./ed25519Native.ts"
import { type SealedReceipt, sealReceipt, type UnsignedReceipt } from "../../spec/receipt.ts"

/** The resolved entry of `sodium-native`, or undefined when it is not installed. */
export const sodiumModule = (): string | undefined => {
  try {
    return createRequire(import.meta.url).resolve("sodium-native")
  } catch {
    return undefined
  }
}

let here: Ed25519 | undefined
/** This thread's implementation, loaded once. */
export const fastestEd25519 = (): Ed25519 => (here ??= ed25519At(sodiumModule()))

/** Seal receipts with the receipt key `key`, signed by this thread's implementation (the same bytes either way). */
export const fastestSealer = (key: KeyObject): ((unsigned: UnsignedReceipt) => SealedReceipt) => {
  const sign = fastestEd25519().signerFor(key)
  return (unsigned) => sealReceipt(sign, unsigned)
}

export { ed25519At, sodiumEd25519 } from "./ed25519Native.ts"
