/**
 * Imports run one way: entry → http → services → store | providers → domain → spec
 * (scripts/imports.ts; `npm run imports` prints the graph).
 */
import { resolve } from "node:path"
import { describe, expect, it } from "vitest"
import { importEdges, layerOf, upwardEdges } from "../../scripts/imports.ts"

const root = resolve(import.meta.dirname, "../..")

describe("the import graph of src/ and spec/", () => {
  const edges = importEdges(root)

  it("is read (every file of src/ and spec/ is in a layer, and the graph is not empty)", () => {
    expect(edges.length).toBeGreaterThan(100)
    expect(edges.filter((e) => layerOf(e.from) === undefined || layerOf(e.to) === undefined)).toEqual([])
  })

  it("has no upward edge (nor one between store and providers)", () => {
    expect(upwardEdges(edges)).toEqual([])
  })

  it("the check fires on an upward edge, and on a sideways one between store and providers", () => {
    const planted = [
      { from: "src/store/chatTransactions.ts", to: "src/services/Ledger.ts" },
      { from: "src/domain/config.ts", to: "src/store/databaseUrl.ts" },
      { from: "src/providers/demo.ts", to: "src/services/Tokenizer.ts" },
      { from: "spec/ledger.ts", to: "src/domain/ids.ts" },
      { from: "src/store/ChatStore.ts", to: "src/providers/Provider.ts" },
      { from: "src/services/Gateway.ts", to: "src/http/errors.ts" }
    ]
    expect(upwardEdges(planted).map((e) => e.from)).toEqual(planted.map((e) => e.from))
    expect(upwardEdges([{ from: "src/http/app.ts", to: "src/services/Gateway.ts" }, { from: "src/store/ChatStore.ts", to: "spec/receipt.ts" }])).toEqual([])
  })
})
