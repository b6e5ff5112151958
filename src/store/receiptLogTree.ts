/**
 * The Merkle log's proofs from stored subtrees (issue 43): RFC 9162 §2.1.3–2.1.4's recursions, with
 * every subtree hash MTH(D[lo:hi]) asked of an oracle. The store keeps complete aligned subtrees of
 * 2^STORED_LEVEL leaves and more (src/store/migrationsReceiptLog.ts); any other range is folded from
 * those and from at most 2^STORED_LEVEL − 1 leaves read from the receipts.
 *
 * A proof is made in two passes of the same recursion: the first with an oracle that only records
 * which stored nodes and which leaves it reads (`plan`), the second, once they are fetched in one read
 * each, with the real hashes. The proofs equal spec/merkle.ts's (a property in
 * test/store/receiptLogTree.test.ts), which the customer's verifier checks.
 */
import { nodeHash, EMPTY_ROOT } from "../../spec/merkle.ts"

export const STORED_LEVEL = 4
const STORED_SPAN = 2 ** STORED_LEVEL

/** The id of the stored node of `level` covering leaves [index·2^level, (index+1)·2^level). */
export const nodeId = (level: number, index: number): number => index * 64 + level

const split = (n: number): number => {
  let k = 1
  while (k * 2 < n) k *= 2
  return k
}

/** Where subtree hashes come from. */
export interface Oracle {
  /** The stored complete subtree (level ≥ STORED_LEVEL). */
  readonly node: (level: number, index: number) => Uint8Array
  /** Leaf hash i. */
  readonly leaf: (i: number) => Uint8Array
}

/** MTH(D[lo:hi]), hi > lo. */
export const rangeHash = (o: Oracle, lo: number, hi: number): Uint8Array => {
  const n = hi - lo
  if (n === 1) return o.leaf(lo)
  if (n >= STORED_SPAN && Number.isInteger(Math.log2(n)) && lo % n === 0) return o.node(Math.log2(n), lo / n)
  const k = split(n)
  return nodeHash(rangeHash(o, lo, lo + k), rangeHash(o, lo + k, hi))
}

/** The root of the first `size` leaves. */
export const rootOf = (o: Oracle, size: number): Uint8Array => (size === 0 ? EMPTY_ROOT : rangeHash(o, 0, size))

/** RFC 9162 §2.1.3.1 PATH(m, D[lo:hi]), bottom-up. */
export const inclusionPath = (o: Oracle, m: number, lo: number, hi: number): Array<Uint8Array> => {
  const n = hi - lo
  if (n <= 1) return []
  const k = split(n)
  return m < k ? [...inclusionPath(o, m, lo, lo + k), rangeHash(o, lo + k, hi)] : [...inclusionPath(o, m - k, lo + k, hi), rangeHash(o, lo, lo + k)]
}

/** RFC 9162 §2.1.4.1 SUBPROOF(m, D[lo:hi], b). */
const subproof = (o: Oracle, m: number, lo: number, hi: number, whole: boolean): Array<Uint8Array> => {
  const n = hi - lo
  if (m === n) return whole ? [] : [rangeHash(o, lo, hi)]
  const k = split(n)
  return m <= k ? [...subproof(o, m, lo, lo + k, whole), rangeHash(o, lo + k, hi)] : [...subproof(o, m - k, lo + k, hi, false), rangeHash(o, lo, lo + k)]
}

/** PROOF(m, D[n]): empty when m is 0 or m = n. */
export const consistencyPath = (o: Oracle, m: number, n: number): Array<Uint8Array> => (m === 0 || m === n ? [] : subproof(o, m, 0, n, true))

/** What a computation reads: node ids, and leaf indices grouped into ranges. */
export interface Plan {
  readonly nodes: Array<number>
  readonly leaves: Array<number>
}

const ZERO = new Uint8Array(32)

/** The nodes and leaves `compute` reads, found by running it on a recording oracle. */
export const plan = (compute: (o: Oracle) => unknown): Plan => {
  const nodes = new Set<number>()
  const leaves = new Set<number>()
  compute({
    node: (level, index) => (nodes.add(nodeId(level, index)), ZERO),
    leaf: (i) => (leaves.add(i), ZERO)
  })
  return { nodes: [...nodes], leaves: [...leaves].sort((a, b) => a - b) }
}

/** Sorted leaf indices as ranges [lo, hi) to read, one read each (gaps of up to 16 leaves read through). */
export const runs = (sorted: ReadonlyArray<number>): Array<readonly [number, number]> => {
  const out: Array<[number, number]> = []
  for (const i of sorted) {
    const last = out[out.length - 1]
    // a gap of a few leaves is read through: one read instead of two
    if (last !== undefined && i - last[1] <= 16) last[1] = i + 1
    else out.push([i, i + 1])
  }
  return out
}

/**
 * The stored nodes that become complete when the log grows from `from` to `to` leaves, each with the
 * range it covers, bottom level first (a parent after its children).
 */
export const newNodes = (from: number, to: number): Array<{ readonly level: number; readonly index: number }> => {
  const out: Array<{ level: number; index: number }> = []
  for (let level = STORED_LEVEL, span = STORED_SPAN; span <= to; level++, span *= 2) {
    for (let index = Math.floor(from / span); (index + 1) * span <= to; index++) out.push({ level, index })
  }
  return out
}

/**
 * A log's right frontier: the roots of the perfect subtrees of its first `size` leaves, leftmost
 * (largest) first — one a set bit of `size`, each aligned, so a subtree of STORED_LEVEL or more is a
 * stored node. What a round keeps in memory between rounds: a new leaf costs its hash and, amortised,
 * one node hash, with no node read; the root is the frontier folded (no read either).
 */
export interface Frontier {
  readonly size: number
  /** levels[i] is the level of hashes[i]; strictly decreasing. */
  readonly levels: ReadonlyArray<number>
  readonly hashes: ReadonlyArray<Uint8Array>
}

export const EMPTY_FRONTIER: Frontier = { size: 0, levels: [], hashes: [] }

/** The perfect subtrees a frontier of `size` leaves holds, leftmost first. */
export const frontierRanges = (size: number): Array<{ readonly level: number; readonly index: number }> => {
  const out: Array<{ level: number; index: number }> = []
  let lo = 0
  for (let level = Math.floor(Math.log2(Math.max(size, 1))) + 1; level >= 0; level--) {
    const span = 2 ** level
    if (size - lo >= span) {
      out.push({ level, index: lo / span })
      lo += span
    }
  }
  return out
}

/**
 * The frontier after `leaves` are appended, and the stored nodes (level ≥ STORED_LEVEL) the appends
 * complete, parents after their children — the nodes `newNodes(f.size, f.size + leaves.length)` names.
 */
export const appendLeaves = (
  f: Frontier,
  leaves: ReadonlyArray<Uint8Array>
): { readonly frontier: Frontier; readonly completed: Array<{ readonly level: number; readonly index: number; readonly hash: Uint8Array }> } => {
  const levels = [...f.levels]
  const hashes = [...f.hashes]
  const completed: Array<{ level: number; index: number; hash: Uint8Array }> = []
  let size = f.size
  for (const leaf of leaves) {
    let level = 0
    let hash = leaf
    size += 1
    while (levels.length > 0 && levels[levels.length - 1] === level) {
      levels.pop()
      hash = nodeHash(hashes.pop()!, hash)
      level += 1
      if (level >= STORED_LEVEL) completed.push({ level, index: size / 2 ** level - 1, hash })
    }
    levels.push(level)
    hashes.push(hash)
  }
  return { frontier: { size, levels, hashes }, completed }
}

/** MTH of the frontier's leaves: its subtrees folded from the smallest (rightmost) up. */
export const frontierRoot = (f: Frontier): Uint8Array => {
  if (f.hashes.length === 0) return EMPTY_ROOT
  let r = f.hashes[f.hashes.length - 1]!
  for (let i = f.hashes.length - 2; i >= 0; i--) r = nodeHash(f.hashes[i]!, r)
  return r
}

/**
 * The frontier of `size` leaves from the store: its subtrees of STORED_LEVEL and more are stored
 * nodes (`node`), the rest — fewer than 2^STORED_LEVEL leaves — folded from the leaves (`leaf`).
 */
export const frontierOf = (o: Oracle, size: number): Frontier => {
  const base = size - (size % STORED_SPAN)
  const upper = frontierRanges(base)
  const start: Frontier = { size: base, levels: upper.map((r) => r.level), hashes: upper.map((r) => o.node(r.level, r.index)) }
  return appendLeaves(start, Array.from({ length: size - base }, (_, i) => o.leaf(base + i))).frontier
}
