/**
 * The two Ed25519 implementations Tollgate may sign receipts and check their signatures with
 * (spec/ed25519.ts) make the same signatures, and give the same verdict on every signature an honest
 * key makes and on every alteration of one: neither a receipt nor the findings of `tollgate audit`
 * can depend on which one loaded.
 */
import fc from "fast-check"
import { generateKeyPairSync, type KeyObject, sign } from "node:crypto"
import { describe, expect, it } from "vitest"
import { type Ed25519, nodeEd25519 } from "../../spec/ed25519.ts"
import { ed25519At, sodiumEd25519 } from "../../src/store/sodium.ts"
import { sodiumModule } from "../../src/store/sodium.ts"

const keys: ReadonlyArray<{ readonly privateKey: KeyObject; readonly publicKey: KeyObject }> = Array.from({ length: 4 }, () => generateKeyPairSync("ed25519"))

const loaded = (): Ed25519 => {
  const path = sodiumModule()
  expect(path).toBeDefined()
  const sodium = sodiumEd25519(path!)
  expect(sodium?.name).toBe("libsodium")
  return sodium!
}

/** One bit of `bytes` flipped (a copy). */
const flipped = (bytes: Buffer, bit: number): Buffer => {
  const copy = Buffer.from(bytes)
  const at = bit % (copy.length * 8)
  copy[at >> 3]! ^= 1 << (at & 7)
  return copy
}

describe("Ed25519 for receipts and the audit: libsodium and node:crypto", () => {
  const sodium = loaded()
  const verdicts = (checker: number, message: Buffer, signature: Buffer) => {
    const key = keys[checker]!.publicKey
    return [nodeEd25519.checkFor(key)(message, signature), sodium.checkFor(key)(message, signature)]
  }

  it("invariant: both accept every genuine signature, and both reject it once its message, its signature or its key changes", () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 600 }),
        fc.nat(3),
        fc.nat(3),
        fc.nat(),
        fc.nat(),
        (bytes, signer, other, messageBit, signatureBit) => {
          const message = Buffer.from(bytes)
          const signature = sign(null, message, keys[signer]!.privateKey)
          expect(verdicts(signer, message, signature)).toEqual([true, true])
          if (message.length > 0) expect(verdicts(signer, flipped(message, messageBit), signature)).toEqual([false, false])
          expect(verdicts(signer, message, flipped(signature, signatureBit))).toEqual([false, false])
          if (other !== signer) expect(verdicts(other, message, signature)).toEqual([false, false])
        }
      ),
      { numRuns: 300 }
    )
  })

  it("invariant: both give the same verdict on arbitrary signature bytes, of any length, without throwing", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), fc.uint8Array({ minLength: 0, maxLength: 80 }), fc.nat(3), (message, signature, checker) => {
        const [viaNode, viaSodium] = verdicts(checker, Buffer.from(message), Buffer.from(signature))
        expect(viaSodium).toBe(viaNode)
        expect(viaNode).toBe(false)
      }),
      { numRuns: 300 }
    )
  })

  it("invariant: both sign every message with the same 64 bytes (Ed25519 is deterministic), which both accept", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 600 }), fc.nat(3), (bytes, signer) => {
        const message = Buffer.from(bytes)
        const { privateKey, publicKey } = keys[signer]!
        const viaSodium = sodium.signerFor(privateKey)(message)
        expect(viaSodium.equals(nodeEd25519.signerFor(privateKey)(message))).toBe(true)
        expect(sodium.checkFor(publicKey)(message, viaSodium)).toBe(true)
      }),
      { numRuns: 300 }
    )
  })

  it("a binding that does not load is no implementation (the audit falls back to node:crypto)", () => {
    expect(sodiumEd25519("/nonexistent/sodium-native/index.js")).toBeUndefined()
    expect(ed25519At("/nonexistent/sodium-native/index.js").name).toBe("node:crypto")
    expect(ed25519At(undefined).name).toBe("node:crypto")
    expect(ed25519At(sodiumModule()).name).toBe("libsodium")
  })
})
