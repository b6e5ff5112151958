/**
 * SQL lives in src/store only (docs/architecture.md, "Layers"; issue 39): services call the store's
 * repositories (src/store/*Repo.ts) and statement factories, and no file of src/ outside src/store
 * writes a statement, imports a SQL client or driver, or names one.
 */
import { readdirSync, readFileSync, statSync } from "node:fs"
import { join, resolve } from "node:path"
import { describe, expect, it } from "vitest"

const root = resolve(import.meta.dirname, "../..")

/** What counts as SQL outside the store: a tagged statement, a client or driver import, or a statement's words. */
const RULES: ReadonlyArray<{ readonly rule: string; readonly pattern: RegExp }> = [
  { rule: "tagged statement", pattern: /\bsql\s*(`|<)/ },
  { rule: "SQL client import", pattern: /\bfrom\s*["'](@effect\/sql[^"']*|better-sqlite3|pg|postgres)["']|\bimport\s*\(\s*["'](@effect\/sql[^"']*|better-sqlite3|pg|postgres)["']/ },
  { rule: "SqlClient", pattern: /\bSqlClient\b/ },
  { rule: "statement text", pattern: /\b(SELECT\s[\s\S]{0,200}?\sFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM)\s/ }
]

export interface Finding {
  readonly file: string
  readonly line: number
  readonly rule: string
}

/** The SQL in one file's text (`file` relative to the repository root); none for a file of src/store. */
export const sqlFindings = (file: string, text: string): ReadonlyArray<Finding> => {
  if (file.startsWith("src/store/")) return []
  return text.split("\n").flatMap((line, i) => RULES.filter((r) => r.pattern.test(line)).map((r) => ({ file, line: i + 1, rule: r.rule })))
}

const filesUnder = (dir: string): Array<string> =>
  readdirSync(join(root, dir)).flatMap((name) => {
    const path = `${dir}/${name}`
    return statSync(join(root, path)).isDirectory() ? filesUnder(path) : /\.(ts|mts|mjs)$/.test(name) ? [path] : []
  })

describe("SQL only in src/store", () => {
  const files = filesUnder("src")

  it("reads the tree (src/ has its services and its store)", () => {
    expect(files.filter((f) => f.startsWith("src/services/")).length).toBeGreaterThan(10)
    expect(files.filter((f) => f.startsWith("src/store/")).length).toBeGreaterThan(10)
  })

  it("no file of src/ outside src/store holds a statement or imports a SQL client", () => {
    expect(files.flatMap((f) => sqlFindings(f, readFileSync(join(root, f), "utf8")))).toEqual([])
  })

  it("the check fires on a planted statement, client import or statement text, and not in src/store", () => {
    const planted = [
      "const rows = yield* sql<{ n: number }>`SELECT COUNT(*) AS n FROM projects`",
      "yield* sql`UPDATE settings SET value = ${id}`",
      'import { SqlClient } from "@effect/sql"',
      'import { PgClient } from "@effect/sql-pg"',
      'import type BetterSqlite3 from "better-sqlite3"',
      "const sql = yield* SqlClient.SqlClient",
      'db.prepare("DELETE FROM idempotency WHERE request_id = ?")',
      "const q = 'INSERT INTO api_keys (id) VALUES (?)'"
    ]
    for (const line of planted) {
      expect(sqlFindings("src/services/Planted.ts", `// a service\n${line}\n`).map((f) => f.line), line).toContain(2)
      expect(sqlFindings("src/store/planted.ts", line), line).toEqual([])
    }
    expect(sqlFindings("src/http/planted.ts", "yield* sql`SELECT 1`").map((f) => f.rule)).toEqual(["tagged statement"])
    // Words of prose and code that only look like SQL are not findings.
    expect(sqlFindings("src/services/Planted.ts", "// one INSERT wins; select the route from the card\nconst sqlite = yield* Effect.serviceOption(Sqlite)")).toEqual([])
  })
})
