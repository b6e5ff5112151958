/**
 * libsodium's Ed25519 (spec/ed25519.ts's interface) through the `sodium-native` binding, loaded from a
 * resolved file path, not by package name: the audit's workers and the store worker run bundled code
 * that cannot resolve packages on its own (./sodium.ts resolves it). Imports only node: and spec/, so
 * the audit's signature workers stay that small (test/audit/jobs.test.ts).
 */
import type { KeyObject } from "node:crypto"
import { createRequire } from "node:module"
import { type Ed25519, nodeEd25519 } from "../../spec/ed25519.ts"

interface Sodium {
  readonly crypto_sign_verify_detached: (signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array) => boolean
  readonly crypto_sign_detached: (signature: Uint8Array, message: Uint8Array, secretKey: Uint8Array) => void
  readonly crypto_sign_BYTES: number
  readonly crypto_sign_PUBLICKEYBYTES: number
  readonly crypto_sign_SECRETKEYBYTES: number
}

/** The 32 bytes of an Ed25519 public key (its JWK `x`), or undefined for any other key. */
const rawPublicKey = (key: KeyObject): Buffer | undefined => {
  if (key.asymmetricKeyType !== "ed25519") return undefined
  const { x } = key.export({ format: "jwk" })
  return x === undefined ? undefined : Buffer.from(x, "base64url")
}

/** libsodium's 64-byte secret key of an Ed25519 private key: its seed (JWK `d`), then its public key (`x`). */
const rawSecretKey = (key: KeyObject): Buffer | undefined => {
  if (key.type !== "private" || key.asymmetricKeyType !== "ed25519") return undefined
  const { d, x } = key.export({ format: "jwk" })
  if (d === undefined || x === undefined) return undefined
  // Its own memory (`alloc` never takes from the shared pool of small buffers), as a KeyObject keeps its key.
  const secret = Buffer.alloc(64)
  secret.write(d, 0, "base64url")
  secret.write(x, 32, "base64url")
  return secret
}

/** libsodium through the binding at `modulePath` where it loads, node:crypto otherwise (no path: node:crypto). */
export const ed25519At = (modulePath: string | undefined): Ed25519 => (modulePath === undefined ? undefined : sodiumEd25519(modulePath)) ?? nodeEd25519

/**
 * libsodium's Ed25519 through the binding at `modulePath` (the resolved entry of `sodium-native`), or
 * undefined when it does not load (no prebuilt binary for this platform and no compiler at install).
 */
export const sodiumEd25519 = (modulePath: string): Ed25519 | undefined => {
  let sodium: Sodium
  try {
    sodium = createRequire(modulePath)(modulePath) as Sodium
  } catch {
    return undefined
  }
  if (typeof sodium.crypto_sign_verify_detached !== "function" || typeof sodium.crypto_sign_detached !== "function") return undefined
  const signatureBytes = sodium.crypto_sign_BYTES
  return {
    name: "libsodium",
    checkFor: (key) => {
      const raw = rawPublicKey(key)
      // Not an Ed25519 key (the auditor refuses those before asking): OpenSSL's answer.
      if (raw === undefined || raw.byteLength !== sodium.crypto_sign_PUBLICKEYBYTES) return nodeEd25519.checkFor(key)
      // The binding asserts its arguments' lengths: a signature of any other length is simply not one.
      return (message, signature) => signature.byteLength === signatureBytes && sodium.crypto_sign_verify_detached(signature, message, raw)
    },
    signerFor: (key) => {
      const secret = rawSecretKey(key)
      if (secret === undefined || secret.byteLength !== sodium.crypto_sign_SECRETKEYBYTES) return nodeEd25519.signerFor(key)
      return (message) => {
        const signature = Buffer.allocUnsafe(signatureBytes)
        sodium.crypto_sign_detached(signature, message, secret)
        return signature
      }
    }
  }
}
