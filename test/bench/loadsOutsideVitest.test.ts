/**
 * The bench's own programs run under plain Node (`npm run bench`, `npm run bench -- --soak`), not under
 * vitest: a module they import that imports "vitest" throws at load ("Vitest failed to access its
 * internal state"). The soak imports the crash suite's support for its server, store and clients; this
 * loads it, and the bench's shared libraries, the way the soak does.
 */
import { spawnSync } from "node:child_process"
import { describe, expect, it } from "vitest"

const loads = (modules: ReadonlyArray<string>) => {
  const script = `for (const m of ${JSON.stringify(modules)}) await import(m); console.log("loaded")`
  return spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { encoding: "utf8", timeout: 60_000 })
}

describe("the bench's imports outside vitest", () => {
  it("the test modules the soak, the mock target and the PostgreSQL bench import load under plain Node", () => {
    const child = loads(["./test/crash/support.ts", "./test/support/mockUpstream.ts", "./test/support/pg.ts", "./test/support/portArgs.ts", "./bench/lib/procs.ts", "./bench/lib/load.ts"])
    expect({ status: child.status, out: child.stdout.trim(), err: child.stderr.includes("Vitest") ? child.stderr : "" }).toEqual({ status: 0, out: "loaded", err: "" })
  })

  it("(the check can fail) a module that imports vitest does not load under plain Node", () => {
    const child = loads(["./test/crash/harness.ts"])
    expect(child.status).not.toBe(0)
    expect(child.stderr).toContain("Vitest")
  })
})
