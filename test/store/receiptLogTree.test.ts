/**
 * src/store/receiptLogTree.ts against the rulebook (spec/merkle.ts): proofs made from stored complete
 * subtrees (16 leaves and more) and a few leaves are the proofs made from all the leaves, and the
 * nodes each extension stores tile the tree exactly once whatever the steps the log grew by.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { consistencyProof, inclusionProof, leafHash, treeHead } from "../../spec/merkle.ts"
import {
  appendLeaves,
  consistencyPath,
  EMPTY_FRONTIER,
  type Frontier,
  frontierOf,
  frontierRoot,
  inclusionPath,
  newNodes,
  nodeId,
  type Oracle,
  plan,
  rootOf,
  STORED_LEVEL
} from "../../src/store/receiptLogTree.ts"

const leavesOf = (n: number): Array<Uint8Array> => Array.from({ length: n }, (_, i) => leafHash(Uint8Array.of(i & 255, i >> 8)))

/** An oracle over all leaves that refuses a node the store would not hold at `size`. */
const oracleOf = (leaves: ReadonlyArray<Uint8Array>, size: number): Oracle => ({
  node: (level, index) => {
    const span = 2 ** level
    if (level < STORED_LEVEL || (index + 1) * span > size) throw new Error(`node ${level}/${index} is not stored at size ${size}`)
    return treeHead(leaves.slice(index * span, (index + 1) * span))
  },
  leaf: (i) => {
    if (i >= size) throw new Error(`leaf ${i} beyond ${size}`)
    return leaves[i]!
  }
})

describe("the receipt log's stored tree", () => {
  it("inclusion proofs from stored subtrees equal spec/merkle.ts's from all leaves (every leaf, any size)", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 300 }), fc.nat(), (size, pick) => {
        const leaves = leavesOf(size)
        const o = oracleOf(leaves, size)
        const m = pick % size
        expect(inclusionPath(o, m, 0, size)).toEqual(inclusionProof(leaves, m, size))
        expect(rootOf(o, size)).toEqual(treeHead(leaves, size))
        // a proof reads O(log n) nodes and at most two blocks of leaves
        const p = plan((x) => inclusionPath(x, m, 0, size))
        expect(p.leaves.length).toBeLessThanOrEqual(2 * 2 ** STORED_LEVEL)
      }),
      { numRuns: 300 }
    )
  })

  it("consistency proofs from stored subtrees equal spec/merkle.ts's (every pair of sizes)", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 300 }), fc.nat(), (size, pick) => {
        const leaves = leavesOf(size)
        const from = pick % (size + 1)
        expect(consistencyPath(oracleOf(leaves, size), from, size)).toEqual(consistencyProof(leaves, from, size))
      }),
      { numRuns: 300 }
    )
  })

  it("the nodes stored by any sequence of extensions are every complete aligned subtree, each once", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 70 }), { minLength: 1, maxLength: 12 }), (steps) => {
        const seen: Array<number> = []
        let size = 0
        for (const s of steps) {
          seen.push(...newNodes(size, size + s).map((n) => nodeId(n.level, n.index)))
          size += s
        }
        const want: Array<number> = []
        for (let level = STORED_LEVEL; 2 ** level <= size; level++) for (let i = 0; (i + 1) * 2 ** level <= size; i++) want.push(nodeId(level, i))
        expect([...seen].sort((a, b) => a - b)).toEqual(want.sort((a, b) => a - b))
      })
    )
  })

  it("a frontier kept between rounds or read from the store at any size: appends store newNodes' nodes with their tree heads, its root is the tree head", () => {
    fc.assert(
      fc.property(fc.array(fc.record({ step: fc.integer({ min: 0, max: 70 }), reread: fc.boolean() }), { minLength: 1, maxLength: 10 }), (steps) => {
        const total = steps.reduce((n, s) => n + s.step, 0)
        const leaves = leavesOf(total)
        let f: Frontier = EMPTY_FRONTIER
        for (const { step, reread } of steps) {
          // the round that finds the log at a size it did not leave reads the frontier from the store
          if (reread) {
            const read = frontierOf(oracleOf(leaves, f.size), f.size)
            // the same frontier as the one kept
            expect(read).toEqual(f)
            f = read
            // O(log n) nodes and fewer than 2^STORED_LEVEL leaves
            const p = plan((o) => frontierOf(o, f.size))
            expect(p.leaves.length).toBeLessThan(2 ** STORED_LEVEL)
          }
          const from = f.size
          const { frontier, completed } = appendLeaves(f, leaves.slice(from, from + step))
          expect(frontier.size).toBe(from + step)
          // in the order they complete (a parent after its children)
          expect(completed.map((c) => [c.level, c.index])).toEqual(newNodes(from, from + step).map((n) => [n.level, n.index]).sort(([l1, i1], [l2, i2]) => (i1! + 1) * 2 ** l1! - (i2! + 1) * 2 ** l2! || l1! - l2!))
          for (const c of completed) expect(c.hash).toEqual(treeHead(leaves.slice(c.index * 2 ** c.level, (c.index + 1) * 2 ** c.level)))
          expect(frontierRoot(frontier)).toEqual(treeHead(leaves, frontier.size))
          f = frontier
        }
      }),
      { numRuns: 200 }
    )
  })
})
