/**
 * Renders the /docs page (src/http/scalarPage.ts: the platform's Scalar page, script inlined) into
 * `docs.html` beside a bundled server, so the server serves it from disk and its bundle holds no
 * Scalar script (src/http/docs.ts). Called by scripts/build.mjs.
 */
import { build } from "esbuild"
import { rm, writeFile } from "node:fs/promises"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..")

/** Bundle the page's module into `outdir` for a moment, run it, write `outdir/docs.html`. */
export const writeDocsPage = async (outdir) => {
  const renderer = join(outdir, `.docs-page-${process.pid}.mjs`)
  await build({ bundle: true, platform: "node", format: "esm", target: "node20", entryPoints: [join(root, "src/http/scalarPage.ts")], outfile: renderer, logLevel: "warning" })
  try {
    const { renderScalarPage } = await import(pathToFileURL(renderer).href)
    await writeFile(join(outdir, "docs.html"), await renderScalarPage())
  } finally {
    await rm(renderer, { force: true })
  }
}
