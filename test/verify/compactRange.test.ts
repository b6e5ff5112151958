/**
 * spec/merkle.ts `CompactRange`, the verifier's O(log n) view of a growing log: its root after every
 * append is the RFC 9162 tree head of the leaves so far (`treeHead`, which the RFC's vectors pin in
 * test/spec/merkle.test.ts).
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { CompactRange, leafHash, treeHead } from "../../spec/merkle.ts"

describe("CompactRange", () => {
  it("property: after every append, root() is treeHead of the leaves appended so far, and size their count", () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ minLength: 0, maxLength: 8 }), { maxLength: 70 }), (data) => {
        const leaves = data.map((d) => leafHash(d))
        const range = new CompactRange()
        expect(range.root()).toEqual(treeHead([]))
        leaves.forEach((leaf, i) => {
          range.append(leaf)
          expect(range.size).toBe(i + 1)
          expect(range.root()).toEqual(treeHead(leaves, i + 1))
        })
      })
    )
  })
})
