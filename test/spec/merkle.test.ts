/**
 * spec/merkle.ts: RFC 9162 §2.1 tree hashing, inclusion and consistency proofs.
 *
 * The published vectors are RFC 6962's 8-leaf test data as Certificate Transparency's and
 * transparency-dev's Merkle libraries carry them: the leaf inputs, the tree hashes of every size
 * and the subtree hashes in github.com/transparency-dev/merkle testonly/constants.go, the inclusion
 * and consistency paths in proof/verify_test.go (typed in here; their leaf numbers there are
 * 1-based, here 0-based).
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import {
  consistencyProof,
  EMPTY_ROOT,
  inclusionProof,
  leafHash,
  nodeHash,
  receiptLeafHash,
  rootFromInclusionProof,
  sha256,
  treeHead,
  verifyConsistency,
  verifyInclusion
} from "../../spec/merkle.ts"

const hex = (h: Uint8Array): string => Buffer.from(h).toString("hex")
const unhex = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, "hex"))

// ---------------------------------------------------------------------------------------------
// Published vectors

const LEAF_INPUTS = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"].map(unhex)

/** The leaf hashes of LEAF_INPUTS (level 0 of the 8-leaf tree). */
const LEAF_HASHES = [
  "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
  "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
  "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
  "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
  "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
  "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
  "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
  "46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1"
]

/** Level 1 and 2 of the 8-leaf tree. */
const LEVEL_1 = [
  "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
  "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
  "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
  "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"
]
const LEVEL_2 = ["d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7", "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]

/** The root of the tree of the first n inputs, n = 0..8. */
const ROOTS = [
  "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
  "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
  "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
  "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
  "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
  "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
  "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
  "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
  "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"
]

const INCLUSION: ReadonlyArray<{ leaf: number; size: number; path: ReadonlyArray<string> }> = [
  { leaf: 0, size: 1, path: [] },
  { leaf: 0, size: 8, path: [LEAF_HASHES[1]!, LEVEL_1[1]!, LEVEL_2[1]!] },
  { leaf: 5, size: 8, path: [LEAF_HASHES[4]!, LEVEL_1[3]!, LEVEL_2[0]!] },
  { leaf: 2, size: 3, path: [LEVEL_1[0]!] },
  { leaf: 1, size: 5, path: [LEAF_HASHES[0]!, LEVEL_1[1]!, LEAF_HASHES[4]!] }
]

const CONSISTENCY: ReadonlyArray<{ from: number; to: number; path: ReadonlyArray<string> }> = [
  { from: 1, to: 1, path: [] },
  { from: 1, to: 8, path: [LEAF_HASHES[1]!, LEVEL_1[1]!, LEVEL_2[1]!] },
  { from: 6, to: 8, path: [LEVEL_1[2]!, LEVEL_1[3]!, LEVEL_2[0]!] },
  { from: 2, to: 5, path: [LEVEL_1[1]!, LEAF_HASHES[4]!] },
  { from: 6, to: 7, path: [LEVEL_1[2]!, LEAF_HASHES[6]!, LEVEL_2[0]!] }
]

const leaves8 = LEAF_INPUTS.map(leafHash)
const SOME_HASH = unhex("abacaba000000000000000000000000000000000000000000060061e00123456")

const flipped = (h: Uint8Array, bit: number): Uint8Array => {
  const c = new Uint8Array(h)
  c[0] = c[0]! ^ (1 << bit)
  return c
}

describe("RFC 6962 / RFC 9162 test vectors", () => {
  it("the leaf hashes, the subtree hashes and the root of every size 0..8", () => {
    expect(leaves8.map(hex)).toEqual(LEAF_HASHES)
    expect([0, 1, 2, 3].map((i) => hex(nodeHash(leaves8[2 * i]!, leaves8[2 * i + 1]!)))).toEqual(LEVEL_1)
    expect(hex(EMPTY_ROOT)).toBe(ROOTS[0])
    for (let n = 0; n <= 8; n++) expect(hex(treeHead(leaves8, n)), `size ${n}`).toBe(ROOTS[n])
  })

  it("inclusion: the published paths are generated, verify, and every corruption of them is refused", () => {
    for (const v of INCLUSION) {
      const path = v.path.map(unhex)
      const root = unhex(ROOTS[v.size]!)
      const leaf = leaves8[v.leaf]!
      expect(inclusionProof(leaves8, v.leaf, v.size).map(hex), `${v.leaf}@${v.size}`).toEqual(v.path)
      expect(hex(rootFromInclusionProof(v.leaf, v.size, leaf, path)!)).toBe(ROOTS[v.size])
      expect(verifyInclusion(v.leaf, v.size, leaf, path, root)).toBe(true)

      const refused: Array<[string, boolean]> = [
        ["index - 1", verifyInclusion(v.leaf - 1, v.size, leaf, path, root)],
        ["index + 1", verifyInclusion(v.leaf + 1, v.size, leaf, path, root)],
        ["index ^ 2", verifyInclusion(v.leaf ^ 2, v.size, leaf, path, root)],
        ["size * 2", verifyInclusion(v.leaf, v.size * 2, leaf, path, root)],
        ["size / 2", verifyInclusion(v.leaf, Math.floor(v.size / 2), leaf, path, root)],
        ["another leaf", verifyInclusion(v.leaf, v.size, SOME_HASH, path, root)],
        ["empty root", verifyInclusion(v.leaf, v.size, leaf, path, EMPTY_ROOT)],
        ["another root", verifyInclusion(v.leaf, v.size, leaf, path, SOME_HASH)],
        ["short leaf", verifyInclusion(v.leaf, v.size, leaf.subarray(1), path, root)],
        ["trailing root", verifyInclusion(v.leaf, v.size, leaf, [...path, root], root)],
        ["trailing empty", verifyInclusion(v.leaf, v.size, leaf, [...path, new Uint8Array()], root)],
        ["preceding root", verifyInclusion(v.leaf, v.size, leaf, [root, ...path], root)],
        ...path.map((_, i): [string, boolean] => [`bit 3 of proof[${i}]`, verifyInclusion(v.leaf, v.size, leaf, path.map((h, j) => (j === i ? flipped(h, 3) : h)), root)]),
        ...(path.length > 0 ? [["last removed", verifyInclusion(v.leaf, v.size, leaf, path.slice(0, -1), root)] as [string, boolean]] : []),
        ...(path.length > 1 ? [["inserted", verifyInclusion(v.leaf, v.size, leaf, [path[0]!, SOME_HASH, ...path.slice(1)], root)] as [string, boolean]] : [])
      ]
      expect(refused.filter(([, ok]) => ok).map(([name]) => `${v.leaf}@${v.size}: ${name}`)).toEqual([])
    }
  })

  it("consistency: the published paths are generated, verify, and every corruption of them is refused", () => {
    for (const v of CONSISTENCY) {
      const path = v.path.map(unhex)
      const r1 = unhex(ROOTS[v.from]!)
      const r2 = unhex(ROOTS[v.to]!)
      expect(consistencyProof(leaves8, v.from, v.to).map(hex), `${v.from}→${v.to}`).toEqual(v.path)
      expect(verifyConsistency(v.from, v.to, path, r1, r2)).toBe(true)
      if (path.length === 0) continue
      const refused: Array<[string, boolean]> = [
        ["from - 1", verifyConsistency(v.from - 1, v.to, path, r1, r2)],
        ["from + 1", verifyConsistency(v.from + 1, v.to, path, r1, r2)],
        ["from ^ 2", verifyConsistency(v.from ^ 2, v.to, path, r1, r2)],
        ["to * 2", verifyConsistency(v.from, v.to * 2, path, r1, r2)],
        ["to / 2", verifyConsistency(v.from, Math.floor(v.to / 2), path, r1, r2)],
        ["another from root", verifyConsistency(v.from, v.to, path, SOME_HASH, r2)],
        ["another to root", verifyConsistency(v.from, v.to, path, r1, SOME_HASH)],
        ["roots swapped", verifyConsistency(v.from, v.to, path, r2, r1)],
        ["empty proof", verifyConsistency(v.from, v.to, [], r1, r2)],
        ["trailing root 1", verifyConsistency(v.from, v.to, [...path, r1], r1, r2)],
        ["trailing root 2", verifyConsistency(v.from, v.to, [...path, r2], r1, r2)],
        ["preceding root 1", verifyConsistency(v.from, v.to, [r1, ...path], r1, r2)],
        ["preceding root 2", verifyConsistency(v.from, v.to, [r2, ...path], r1, r2)],
        ["preceding proof[0]", verifyConsistency(v.from, v.to, [path[0]!, ...path], r1, r2)],
        ["truncated", verifyConsistency(v.from, v.to, path.slice(0, -1), r1, r2)],
        ...path.map((_, i): [string, boolean] => [`bit 4 of proof[${i}]`, verifyConsistency(v.from, v.to, path.map((h, j) => (j === i ? flipped(h, 4) : h)), r1, r2)])
      ]
      expect(refused.filter(([, ok]) => ok).map(([name]) => `${v.from}→${v.to}: ${name}`)).toEqual([])
    }
  })

  it("the ends: the empty tree is consistent with any tree only under its own root; equal sizes need equal roots and no proof", () => {
    const r5 = unhex(ROOTS[5]!)
    expect(consistencyProof(leaves8, 0, 5)).toEqual([])
    expect(verifyConsistency(0, 5, [], EMPTY_ROOT, r5)).toBe(true)
    expect(verifyConsistency(0, 0, [], EMPTY_ROOT, EMPTY_ROOT)).toBe(true)
    expect(verifyConsistency(0, 5, [], SOME_HASH, r5)).toBe(false)
    expect(verifyConsistency(0, 0, [], EMPTY_ROOT, SOME_HASH)).toBe(false)
    expect(verifyConsistency(0, 5, [EMPTY_ROOT], EMPTY_ROOT, r5)).toBe(false)
    expect(verifyConsistency(5, 5, [], r5, r5)).toBe(true)
    expect(verifyConsistency(5, 5, [], r5, SOME_HASH)).toBe(false)
    expect(verifyConsistency(5, 5, [EMPTY_ROOT], r5, r5)).toBe(false)
    expect(verifyConsistency(5, 4, [], r5, r5)).toBe(false)
    // An inclusion proof needs a leaf inside a non-empty tree.
    for (const [i, n] of [[0, 0], [1, 0], [2, 1], [-1, 4], [0.5, 4]] as const) expect(verifyInclusion(i, n, SOME_HASH, [], SOME_HASH)).toBe(false)
    expect(verifyInclusion(0, 1, leaves8[0]!, [], leaves8[0]!)).toBe(true)
  })

  it("generation refuses sizes and indices outside the leaves it has", () => {
    expect(() => treeHead(leaves8, 9)).toThrow(RangeError)
    expect(() => inclusionProof(leaves8, 3, 3)).toThrow(RangeError)
    expect(() => inclusionProof(leaves8, 0, 9)).toThrow(RangeError)
    expect(() => consistencyProof(leaves8, 4, 3)).toThrow(RangeError)
    expect(() => consistencyProof(leaves8, 1, 9)).toThrow(RangeError)
  })

  it("a receipt's leaf is the leaf hash of the 32 bytes its hex hash spells, and nothing else is a receipt hash", () => {
    const h = "ab".repeat(32)
    expect(hex(receiptLeafHash(h))).toBe(hex(sha256(Uint8Array.of(0), unhex(h))))
    expect(hex(receiptLeafHash(h))).not.toBe(hex(leafHash(Buffer.from(h, "utf8"))))
    for (const bad of ["", "AB".repeat(32), "ab".repeat(31), "ab".repeat(33), "zz".repeat(32)]) expect(() => receiptLeafHash(bad)).toThrow(TypeError)
  })
})

// ---------------------------------------------------------------------------------------------
// Properties

const hash32 = fc.uint8Array({ minLength: 32, maxLength: 32 })
/** Distinct leaf hashes. */
const distinct = (min: number, max: number) => fc.uniqueArray(hash32, { minLength: min, maxLength: max, selector: hex })

/**
 * An independent way to the tree head: append leaves to a stack of perfect subtrees, merging equal
 * sizes (the "compact range" a log keeps to append in O(log n)), then fold the stack from the right.
 */
const compactRoot = (leaves: ReadonlyArray<Uint8Array>): Uint8Array => {
  const stack: Array<{ size: number; hash: Uint8Array }> = []
  for (const leaf of leaves) {
    let top = { size: 1, hash: leaf }
    while (stack.length > 0 && stack[stack.length - 1]!.size === top.size) {
      const left = stack.pop()!
      top = { size: left.size * 2, hash: nodeHash(left.hash, top.hash) }
    }
    stack.push(top)
  }
  if (stack.length === 0) return EMPTY_ROOT
  let root = stack.pop()!.hash
  while (stack.length > 0) root = nodeHash(stack.pop()!.hash, root)
  return root
}

describe("sizes beyond 32 bits", () => {
  // A tree whose leaves are all one hash: a subtree's hash depends only on its size, so the proofs of
  // a tree of 2^33 + 5 leaves can be written down (PATH and SUBPROOF of RFC 9162 over sizes) and
  // checked: the verifiers halve sizes by arithmetic, not by the 32-bit bitwise operators.
  const leaf = leafHash(Uint8Array.of(7))
  const memo = new Map<number, Uint8Array>([[1, leaf]])
  const split = (n: number): number => 2 ** Math.ceil(Math.log2(n) - 1)
  const uniform = (n: number): Uint8Array => {
    let h = memo.get(n)
    if (h === undefined) {
      const k = split(n)
      h = nodeHash(uniform(k), uniform(n - k))
      memo.set(n, h)
    }
    return h
  }
  const path = (m: number, n: number): Array<Uint8Array> => {
    if (n === 1) return []
    const k = split(n)
    return m < k ? [...path(m, k), uniform(n - k)] : [...path(m - k, n - k), uniform(k)]
  }
  const subproof = (m: number, n: number, b: boolean): Array<Uint8Array> => {
    if (m === n) return b ? [] : [uniform(n)]
    const k = split(n)
    return m <= k ? [...subproof(m, k, b), uniform(n - k)] : [...subproof(m - k, n - k, false), uniform(k)]
  }

  it("inclusion and consistency verify at 2^33 + 5 leaves, and not against the root of 2^33 + 6", () => {
    const n = 2 ** 33 + 5
    expect(split(n)).toBe(2 ** 33)
    expect(split(2 ** 33)).toBe(2 ** 32)
    for (const i of [0, 2 ** 32 + 3, 2 ** 33 - 1, 2 ** 33, n - 1]) {
      expect(verifyInclusion(i, n, leaf, path(i, n), uniform(n)), `leaf ${i}`).toBe(true)
      expect(verifyInclusion(i, n, leaf, path(i, n), uniform(n + 1)), `leaf ${i}, root of n + 1`).toBe(false)
    }
    for (const m of [1, 2 ** 32 + 1, 2 ** 33 - 3, 2 ** 33, n - 1]) {
      expect(verifyConsistency(m, n, subproof(m, n, true), uniform(m), uniform(n)), `${m} → n`).toBe(true)
      expect(verifyConsistency(m, n, subproof(m, n, true), uniform(m), uniform(n + 1)), `${m} → n, root of n + 1`).toBe(false)
    }
  })
})

describe("properties", () => {
  it("the tree head of every size 0..130 is the root a compact range folds to", () => {
    const leaves = Array.from({ length: 130 }, (_, i) => leafHash(Buffer.from(String(i))))
    for (let n = 0; n <= leaves.length; n++) expect(hex(treeHead(leaves, n)), `size ${n}`).toBe(hex(compactRoot(leaves.slice(0, n))))
  })

  it("every leaf's inclusion proof verifies against the tree head of every size that holds it", () => {
    fc.assert(
      fc.property(fc.array(hash32, { minLength: 1, maxLength: 36 }), (leaves) => {
        for (let n = 1; n <= leaves.length; n++) {
          const root = treeHead(leaves, n)
          for (let i = 0; i < n; i++) {
            const proof = inclusionProof(leaves, i, n)
            if (!verifyInclusion(i, n, leaves[i]!, proof, root)) throw new Error(`leaf ${i} in tree ${n}`)
          }
        }
      }),
      { numRuns: 60 }
    )
  })

  it("every pair of sizes m ≤ n is consistent", () => {
    fc.assert(
      fc.property(fc.array(hash32, { minLength: 0, maxLength: 36 }), (leaves) => {
        for (let n = 0; n <= leaves.length; n++) {
          const root = treeHead(leaves, n)
          for (let m = 0; m <= n; m++) {
            if (!verifyConsistency(m, n, consistencyProof(leaves, m, n), treeHead(leaves, m), root)) throw new Error(`${m} → ${n}`)
          }
        }
      }),
      { numRuns: 60 }
    )
  })

  type Tamper = "changed" | "removed" | "inserted" | "reordered"
  /**
   * A log of n distinct leaves a customer saw (it kept the checkpoints of every size), then the same
   * log with one leaf changed, removed, inserted or two leaves swapped at position j, grown by fresh
   * leaves: what the operator would serve afterwards.
   */
  const tampered = fc
    .tuple(distinct(1, 16).chain((pool) => fc.tuple(fc.constant(pool), fc.integer({ min: 1, max: Math.max(1, pool.length - 1) }))), fc.constantFrom<Tamper>("changed", "removed", "inserted", "reordered"), fc.nat(), fc.nat())
    .filter(([[pool, n], how]) => n < pool.length && (how !== "reordered" || n >= 2))
    .map(([[pool, n], how, a, b]) => {
      const original = pool.slice(0, n)
      const fresh = pool.slice(n)
      const j = a % n
      let edited: Array<Uint8Array>
      if (how === "changed") edited = original.map((h, i) => (i === j ? fresh[0]! : h))
      else if (how === "removed") edited = original.filter((_, i) => i !== j)
      else if (how === "inserted") edited = [...original.slice(0, j), fresh[0]!, ...original.slice(j)]
      else {
        const k = j + 1 + (b % (n - 1 - j || 1))
        const [x, y] = k < n ? [j, k] : [j - 1, j]
        edited = original.map((h, i) => (i === x ? original[y]! : i === y ? original[x]! : h))
      }
      const served = [...edited, ...fresh.slice(1)]
      return { original, served, how, first: served.findIndex((h, i) => i >= n || hex(h) !== hex(original[i]!)) }
    })
    .filter(({ served, original }) => served.length >= original.length)

  it("any changed, removed, inserted or reordered leaf makes the proofs fail against the original roots", () => {
    fc.assert(
      fc.property(tampered, ({ original, served, first }) => {
        const n = original.length
        expect(first).toBeGreaterThanOrEqual(0)
        expect(first).toBeLessThan(n)
        // The operator's tree of the size the customer saw has another root: two histories of one size.
        expect(hex(treeHead(served, n))).not.toBe(hex(treeHead(original, n)))
        for (let m = 1; m <= n; m++) {
          const kept = treeHead(original, m)
          for (let N = m; N <= served.length; N++) {
            const consistent = verifyConsistency(m, N, consistencyProof(served, m, N), kept, treeHead(served, N))
            // The untouched prefix stays consistent; any checkpoint that covered the tampered leaf does not.
            expect(consistent, `${m} → ${N}, first tampered leaf ${first}`).toBe(m <= first)
          }
          // No leaf of the served log proves into a checkpoint the customer kept that covers the tampering.
          if (m > first) for (let i = 0; i < m; i++) expect(verifyInclusion(i, m, served[i]!, inclusionProof(served, i, m), kept), `leaf ${i} in ${m}`).toBe(false)
        }
        // A receipt the customer holds, at its own index, is not in any later served tree where it was altered or moved.
        for (let i = first; i < n; i++) {
          if (hex(served[i]!) === hex(original[i]!)) continue
          for (let N = i + 1; N <= served.length; N++) expect(verifyInclusion(i, N, original[i]!, inclusionProof(served, i, N), treeHead(served, N))).toBe(false)
        }
      }),
      { numRuns: 200 }
    )
  })
})
