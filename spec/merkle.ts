/**
 * The Merkle log of a project's receipts (DESIGN §11, issue 43): RFC 9162 §2.1's tree hashing, the
 * same as Certificate Transparency's (RFC 6962 §2.1), so tools made for transparency logs agree with it.
 *
 *   leaf i  = SHA-256( 0x00 ‖ the 32 bytes of receipt i's `hash` )     receipts in chain order (seq 1 = leaf 0)
 *   node    = SHA-256( 0x01 ‖ left ‖ right )
 *   MTH({}) = SHA-256( "" ),  MTH(D[n]) = node( MTH(D[0:k]), MTH(D[k:n]) ), k the largest power of two < n
 *
 * The tree of size n is the tree of the first n receipts, so every tree is a prefix of the next:
 * an inclusion proof (§2.1.3) shows that a receipt is leaf i of the tree whose root a checkpoint
 * signed, a consistency proof (§2.1.4) that the tree of size m is the first m leaves of the tree of
 * size n. A log that removed, changed, reordered or inserted a receipt, or showed two histories of
 * one size, cannot give both proofs against the checkpoints a customer kept.
 *
 * Generation works from the array of leaf hashes (O(n) hashes a proof, recomputing the subtrees it
 * needs: a store of the tree's nodes is the gateway's business); verification from hashes only. All
 * hashes are 32-byte Uint8Arrays. Sizes and indices are safe integers and are halved by arithmetic,
 * not by the 32-bit bitwise operators. Nothing here does I/O; SHA-256 is ./platform.ts's, which the
 * browser build of @tollgate/spec swaps.
 */
import { sha256 } from "./platform.ts"

export const HASH_BYTES = 32

/** SHA-256 of the concatenation of `parts`: ./platform.ts's (node:crypto in Node, @noble/hashes in the browser build). */
export { sha256 }

const LEAF_PREFIX = Uint8Array.of(0x00)
const NODE_PREFIX = Uint8Array.of(0x01)

/** RFC 9162 §2.1.1: the hash of a leaf whose data is `data`. */
export const leafHash = (data: Uint8Array): Uint8Array => sha256(LEAF_PREFIX, data)

/**
 * RFC 9162 §2.1.1: the hash of an interior node. Its 65 input bytes written into one array and hashed
 * as one part (no joining of three parts a node: a verifier hashes about one node a receipt).
 */
export const nodeHash = (left: Uint8Array, right: Uint8Array): Uint8Array => {
  if (left.length !== HASH_BYTES || right.length !== HASH_BYTES) return sha256(NODE_PREFIX, left, right)
  const input = new Uint8Array(1 + 2 * HASH_BYTES)
  input[0] = 0x01
  input.set(left, 1)
  input.set(right, 1 + HASH_BYTES)
  return sha256(input)
}

/** The root of the empty tree: SHA-256 of nothing. */
export const EMPTY_ROOT: Uint8Array = sha256()

/**
 * The leaf of a receipt: its data is the 32 bytes its `hash` (lowercase hex, spec/receipt.ts
 * `receiptHash`) spells. Throws on anything that is not such a hash.
 */
export const receiptLeafHash = (receiptHashHex: string): Uint8Array => {
  // 0x00 and the 32 bytes the hex spells, decoded into one array and hashed as one part (one a receipt,
  // in a verifier); a character that is not a lowercase hex digit refuses the whole (as /^[0-9a-f]{64}$/ would).
  const input = new Uint8Array(1 + HASH_BYTES)
  let bad = typeof receiptHashHex !== "string" || receiptHashHex.length !== 2 * HASH_BYTES
  for (let i = 0; i < HASH_BYTES && !bad; i++) {
    const hi = HEX_VALUE[receiptHashHex.charCodeAt(2 * i)] ?? -1
    const lo = HEX_VALUE[receiptHashHex.charCodeAt(2 * i + 1)] ?? -1
    if (hi < 0 || lo < 0) bad = true
    input[1 + i] = (hi << 4) | lo
  }
  if (bad) throw new TypeError(`not a receipt hash: ${JSON.stringify(receiptHashHex)}`)
  return sha256(input)
}

/** The value of a lowercase hex digit by its char code, −1 for any other character below 128. */
const HEX_VALUE: ReadonlyArray<number> = (() => {
  const v = new Array<number>(128).fill(-1)
  for (let d = 0; d < 16; d++) v["0123456789abcdef".charCodeAt(d)] = d
  return v
})()

export const equalHashes = (a: Uint8Array, b: Uint8Array): boolean => {
  if (a.length !== b.length) return false
  let diff = 0
  for (let i = 0; i < a.length; i++) diff |= a[i]! ^ b[i]!
  return diff === 0
}

const isSize = (n: number): boolean => Number.isSafeInteger(n) && n >= 0
const isHash = (h: Uint8Array): boolean => h instanceof Uint8Array && h.length === HASH_BYTES
const half = (n: number): number => Math.floor(n / 2)
const odd = (n: number): boolean => n % 2 === 1

/** The largest power of two strictly below n (n ≥ 2). */
const split = (n: number): number => {
  let k = 1
  while (k * 2 < n) k *= 2
  return k
}

const isPowerOfTwo = (n: number): boolean => {
  if (n < 1) return false
  while (n % 2 === 0) n /= 2
  return n === 1
}

/** MTH(leaves[lo:hi]), hi > lo. */
const rangeHash = (leaves: ReadonlyArray<Uint8Array>, lo: number, hi: number): Uint8Array => {
  if (hi - lo === 1) return leaves[lo]!
  const k = split(hi - lo)
  return nodeHash(rangeHash(leaves, lo, lo + k), rangeHash(leaves, lo + k, hi))
}

const checkSize = (leaves: ReadonlyArray<Uint8Array>, size: number): void => {
  if (!isSize(size) || size > leaves.length) throw new RangeError(`tree size ${size} is not within 0..${leaves.length}`)
}

/** RFC 9162 §2.1.1: the tree head, MTH of the first `size` leaf hashes (all of them by default). */
export const treeHead = (leaves: ReadonlyArray<Uint8Array>, size: number = leaves.length): Uint8Array => {
  checkSize(leaves, size)
  return size === 0 ? EMPTY_ROOT : rangeHash(leaves, 0, size)
}

// ---------------------------------------------------------------------------------------------
// Inclusion (RFC 9162 §2.1.3)

/** PATH(m, D[lo:hi]), appended to `out` leaf-side first. */
const path = (leaves: ReadonlyArray<Uint8Array>, m: number, lo: number, hi: number, out: Array<Uint8Array>): void => {
  if (hi - lo <= 1) return
  const k = split(hi - lo)
  if (m < k) {
    path(leaves, m, lo, lo + k, out)
    out.push(rangeHash(leaves, lo + k, hi))
  } else {
    path(leaves, m - k, lo + k, hi, out)
    out.push(rangeHash(leaves, lo, lo + k))
  }
}

/**
 * RFC 9162 §2.1.3.1: the inclusion proof of leaf `leafIndex` (0-based: receipt seq − 1) in the tree
 * of the first `treeSize` leaves. Throws RangeError unless 0 ≤ leafIndex < treeSize ≤ leaves.length.
 */
export const inclusionProof = (leaves: ReadonlyArray<Uint8Array>, leafIndex: number, treeSize: number = leaves.length): Array<Uint8Array> => {
  checkSize(leaves, treeSize)
  if (!isSize(leafIndex) || leafIndex >= treeSize) throw new RangeError(`leaf index ${leafIndex} is not within 0..${treeSize - 1}`)
  const out: Array<Uint8Array> = []
  path(leaves, leafIndex, 0, treeSize, out)
  return out
}

/**
 * RFC 9162 §2.1.3.2: the root that `proof` and the leaf's hash make, or undefined when the proof
 * cannot be one for `leafIndex` in a tree of `treeSize` (index out of range, wrong length, a hash
 * not 32 bytes).
 */
export const rootFromInclusionProof = (leafIndex: number, treeSize: number, leaf: Uint8Array, proof: ReadonlyArray<Uint8Array>): Uint8Array | undefined => {
  if (!isSize(leafIndex) || !isSize(treeSize) || leafIndex >= treeSize) return undefined
  if (!isHash(leaf) || !proof.every(isHash)) return undefined
  let fn = leafIndex
  let sn = treeSize - 1
  let r = leaf
  for (const p of proof) {
    if (sn === 0) return undefined
    if (odd(fn) || fn === sn) {
      r = nodeHash(p, r)
      while (!odd(fn) && fn !== 0) {
        fn = half(fn)
        sn = half(sn)
      }
    } else {
      r = nodeHash(r, p)
    }
    fn = half(fn)
    sn = half(sn)
  }
  return sn === 0 ? r : undefined
}

/** Does `proof` show that `leaf` is leaf `leafIndex` of the tree of size `treeSize` whose root is `root`? */
export const verifyInclusion = (leafIndex: number, treeSize: number, leaf: Uint8Array, proof: ReadonlyArray<Uint8Array>, root: Uint8Array): boolean => {
  const r = rootFromInclusionProof(leafIndex, treeSize, leaf, proof)
  return r !== undefined && isHash(root) && equalHashes(r, root)
}

// ---------------------------------------------------------------------------------------------
// Consistency (RFC 9162 §2.1.4)

/** SUBPROOF(m, D[lo:hi], b), appended to `out`. */
const subproof = (leaves: ReadonlyArray<Uint8Array>, m: number, lo: number, hi: number, b: boolean, out: Array<Uint8Array>): void => {
  const n = hi - lo
  if (m === n) {
    if (!b) out.push(rangeHash(leaves, lo, hi))
    return
  }
  const k = split(n)
  if (m <= k) {
    subproof(leaves, m, lo, lo + k, b, out)
    out.push(rangeHash(leaves, lo + k, hi))
  } else {
    subproof(leaves, m - k, lo + k, hi, false, out)
    out.push(rangeHash(leaves, lo, lo + k))
  }
}

/**
 * RFC 9162 §2.1.4.1: the consistency proof of the tree of size `fromSize` with the tree of size
 * `toSize`. Empty when fromSize is 0 or equals toSize. Throws RangeError unless
 * 0 ≤ fromSize ≤ toSize ≤ leaves.length.
 */
export const consistencyProof = (leaves: ReadonlyArray<Uint8Array>, fromSize: number, toSize: number = leaves.length): Array<Uint8Array> => {
  checkSize(leaves, toSize)
  if (!isSize(fromSize) || fromSize > toSize) throw new RangeError(`tree size ${fromSize} is not within 0..${toSize}`)
  const out: Array<Uint8Array> = []
  if (fromSize > 0 && fromSize < toSize) subproof(leaves, fromSize, 0, toSize, true, out)
  return out
}

/**
 * RFC 9162 §2.1.4.2: does `proof` show that the tree of size `fromSize` and root `fromRoot` is the
 * first `fromSize` leaves of the tree of size `toSize` and root `toRoot`?
 *
 * The RFC's algorithm covers 0 < fromSize < toSize; the two ends are: equal sizes are consistent
 * with an empty proof when the roots are equal, and the empty tree with any tree, with an empty
 * proof, provided its root is the empty tree's (a size-0 checkpoint with any other root is refused).
 */
export const verifyConsistency = (
  fromSize: number,
  toSize: number,
  proof: ReadonlyArray<Uint8Array>,
  fromRoot: Uint8Array,
  toRoot: Uint8Array
): boolean => {
  if (!isSize(fromSize) || !isSize(toSize) || fromSize > toSize) return false
  if (!isHash(fromRoot) || !isHash(toRoot) || !proof.every(isHash)) return false
  if (fromSize === 0) return proof.length === 0 && equalHashes(fromRoot, EMPTY_ROOT) && (toSize > 0 || equalHashes(toRoot, EMPTY_ROOT))
  if (fromSize === toSize) return proof.length === 0 && equalHashes(fromRoot, toRoot)
  if (proof.length === 0) return false
  const path = isPowerOfTwo(fromSize) ? [fromRoot, ...proof] : proof
  let fn = fromSize - 1
  let sn = toSize - 1
  while (odd(fn)) {
    fn = half(fn)
    sn = half(sn)
  }
  let fr = path[0]!
  let sr = path[0]!
  for (const c of path.slice(1)) {
    if (sn === 0) return false
    if (odd(fn) || fn === sn) {
      fr = nodeHash(c, fr)
      sr = nodeHash(c, sr)
      while (!odd(fn) && fn !== 0) {
        fn = half(fn)
        sn = half(sn)
      }
    } else {
      sr = nodeHash(sr, c)
    }
    fn = half(fn)
    sn = half(sn)
  }
  return sn === 0 && equalHashes(fr, fromRoot) && equalHashes(sr, toRoot)
}

// ---------------------------------------------------------------------------------------------
// A growing log's head in O(log n) memory

/**
 * The tree head of a log whose leaves arrive one at a time, holding only the roots of its perfect
 * subtrees (a compact range: at most ⌈log2 n⌉ + 1 hashes): what a verifier reading an export of a
 * million receipts keeps instead of the leaves. `root()` is `treeHead` of the leaves appended so far
 * (a property in test/verify/compactRange.test.ts).
 */
export class CompactRange {
  private readonly sizes: Array<number> = []
  private readonly hashes: Array<Uint8Array> = []
  private count = 0

  get size(): number {
    return this.count
  }

  append(leaf: Uint8Array): void {
    let size = 1
    let hash = leaf
    while (this.sizes.length > 0 && this.sizes[this.sizes.length - 1] === size) {
      this.sizes.pop()
      hash = nodeHash(this.hashes.pop()!, hash)
      size *= 2
    }
    this.sizes.push(size)
    this.hashes.push(hash)
    this.count += 1
  }

  /** MTH of the leaves so far: the subtrees' roots folded from the smallest (rightmost) up. */
  root(): Uint8Array {
    if (this.hashes.length === 0) return EMPTY_ROOT
    let r = this.hashes[this.hashes.length - 1]!
    for (let i = this.hashes.length - 2; i >= 0; i--) r = nodeHash(this.hashes[i]!, r)
    return r
  }
}
