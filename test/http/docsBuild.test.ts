/**
 * The /docs page the build writes beside the bundle (scripts/build-docs.mjs, served from disk by
 * src/http/docs.ts) is the page the platform's Scalar route answers from source.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { renderScalarPage } from "../../src/http/scalarPage.ts"
// @ts-expect-error: a build script in plain JavaScript, without types
import { writeDocsPage } from "../../scripts/build-docs.mjs"

describe("the /docs page rendered at build time", () => {
  it("is byte for byte the Scalar page of the HttpApi", async () => {
    const outdir = await mkdtemp(join(process.cwd(), ".docs-build-test-"))
    try {
      await writeDocsPage(outdir)
      const built = await readFile(join(outdir, "docs.html"))
      const page = Buffer.from(await renderScalarPage())
      expect(built.length).toBeGreaterThan(1_000_000)
      expect(built.equals(page)).toBe(true)
      expect(built.toString("utf8")).toContain(`"operationId":"governed.createChatCompletion"`)
    } finally {
      await rm(outdir, { recursive: true, force: true })
    }
  }, 60_000)
})
