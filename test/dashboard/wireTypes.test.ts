/**
 * The dashboard's wire types come from the schemas that serve /openapi.json (src/domain/wire/),
 * imported as types only: `npm run typecheck` (tsc -p dashboard) then fails wherever the dashboard
 * reads a field an answer no longer has, and no byte of Effect reaches the bundle. These checks keep
 * it that way: no shape written by hand in dashboard/src/api.ts, and no value imported from src/.
 */
import { readdirSync, readFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { describe, expect, it } from "vitest"

const root = resolve(import.meta.dirname, "../..")
const dashboard = join(root, "dashboard/src")

/** Lines of a module that declare a wire shape by hand: an interface, or a type alias to an object literal. */
const handWrittenShapes = (text: string): Array<string> =>
  text.split("\n").filter((line) => /^\s*(export\s+)?interface\s/.test(line) || /^\s*(export\s+)?type\s+\w+(<[^>]*>)?\s*=\s*\{/.test(line))

/** Imports of src/ (or of effect) that are not `import type`: they would put the server's code in the bundle. */
const valueImportsOfServerCode = (text: string): Array<string> =>
  text.split("\n").filter((line) => /^\s*import\s/.test(line) && /from\s+["'](\.\.\/)+src\/|from\s+["']effect/.test(line) && !/^\s*import\s+type\s/.test(line))

describe("the dashboard's wire types", () => {
  it("dashboard/src/api.ts writes no shape by hand: each is a schema's encoded type", () => {
    const api = readFileSync(join(dashboard, "api.ts"), "utf8")
    expect(handWrittenShapes(api)).toEqual([])
    for (const shape of ["Session", "ApiKey", "Project", "ProjectSummary", "IssuedKey", "RotatedKey", "RequestEntry", "Receipt", "ReceiptView", "Usage", "Window", "KeyBudget", "EndUser", "EndUserDefault"]) {
      expect(api).toMatch(new RegExp(`export type ${shape} = Wire<typeof [ARSB]\\.\\w+>`))
    }
  })

  it("the dashboard imports src/ and effect as types only", () => {
    const files = readdirSync(dashboard).filter((f) => /\.tsx?$/.test(f))
    const offending = files.flatMap((f) => valueImportsOfServerCode(readFileSync(join(dashboard, f), "utf8")).map((line) => `${f}: ${line}`))
    expect(offending).toEqual([])
    expect(readFileSync(join(dashboard, "api.ts"), "utf8")).toContain('import type * as A from "../../src/domain/wire/admin.ts"')
  })

  it("the checks fire on a planted hand-written shape and a planted value import", () => {
    expect(handWrittenShapes("export interface ApiKey {\n  readonly id: string\n}")).toHaveLength(1)
    expect(handWrittenShapes("type Page<T> = { readonly data: ReadonlyArray<T> }")).toHaveLength(1)
    expect(handWrittenShapes("export type ApiKey = Wire<typeof A.ApiKey>")).toEqual([])
    expect(valueImportsOfServerCode('import { ApiKey } from "../../src/domain/wire/admin.ts"')).toHaveLength(1)
    expect(valueImportsOfServerCode('import { Schema } from "effect"')).toHaveLength(1)
    expect(valueImportsOfServerCode('import type { Schema } from "effect"')).toEqual([])
  })
})
