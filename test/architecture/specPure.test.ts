/**
 * spec/ is the rulebook an auditor reuses (issue 39, item 4): it loads nothing native and reaches
 * nothing of src/. Today it may use node:crypto (hashing, OpenSSL's Ed25519, key objects), which
 * every Node has; the native binding (sodium-native, through node:module) is src/'s choice
 * (src/store/sodium.ts), handed to the rules as an `Ed25519` implementation. The one exception is
 * spec/platform.web.ts, the browser build's host primitives (issue 43), which imports the package's
 * two pure-JavaScript dependencies, @noble/hashes and @noble/ed25519.
 */
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { describe, expect, it } from "vitest"

/** The imports of a file's text that a pure rulebook must not have. */
export const impureImports = (text: string): Array<string> => {
  const found: Array<string> = []
  for (const m of text.matchAll(/(?:from\s+|import\s*\(\s*|require\s*\(\s*)["']([^"']+)["']/g)) {
    const target = m[1]!
    const allowed = target === "node:crypto" || target.startsWith("./") || target.startsWith("../") && !target.includes("src/")
    if (!allowed) found.push(target)
  }
  if (/\bcreateRequire\b/.test(text)) found.push("createRequire")
  return found
}

const specFiles = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? specFiles(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : []))

describe("spec/ loads nothing native and nothing of src/", () => {
  it("every file of spec/ imports only node:crypto and spec/ itself", () => {
    const webPlatform = join("spec", "platform.web.ts")
    const findings = specFiles("spec")
      .filter((f) => !f.startsWith(join("spec", "dist")))
      .flatMap((f) => impureImports(readFileSync(f, "utf8")).filter((i) => !(f === webPlatform && i.startsWith("@noble/"))).map((i) => `${f}: ${i}`))
    expect(findings).toEqual([])
  })

  it("the check fires on a native binding, node:module, another node module and src/", () => {
    expect(impureImports(`import { createRequire } from "node:module"\nconst s = createRequire(p)(p)`)).toEqual(["node:module", "createRequire"])
    expect(impureImports(`import sodium from "sodium-native"`)).toEqual(["sodium-native"])
    expect(impureImports(`import { readFileSync } from "node:fs"`)).toEqual(["node:fs"])
    expect(impureImports(`import { Settings } from "../src/domain/config.ts"`)).toEqual(["../src/domain/config.ts"])
    expect(impureImports(`import { sha256 } from "node:crypto"\nimport { rules } from "./ledger.ts"`)).toEqual([])
  })
})
