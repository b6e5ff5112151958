#!/usr/bin/env node
/**
 * Bundles a server entry and the store worker into one folder of plain ES modules, so `npm start`
 * runs Node on JavaScript instead of transpiling TypeScript at run time.
 *
 * Why (docs/architecture.md, "How npm start runs"): running through tsx's loader keeps every module of
 * `effect` and a second module graph in the store worker's thread, about 430 MB RSS at idle; the
 * bundle holds only the code reached from the entries, ≈ 200 MB. The store worker is found beside
 * its server as `storeWorker.mjs` (src/store/ChatStore.ts resolves it from its own module URL),
 * which is why both land in one folder. `better-sqlite3` stays a package: it is a native addon.
 *
 *   node scripts/build.mjs                       # src/main.ts → dist/main.mjs (+ dist/storeWorker.mjs)
 *   node scripts/build.mjs ENTRY.ts OUTDIR [WORKER.ts]   # any entry, e.g. the bench's targets
 */
import { build } from "esbuild"
import { fileURLToPath } from "node:url"
import { basename, dirname, join, resolve } from "node:path"
import { writeDocsPage } from "./build-docs.mjs"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..")

// Bundled CommonJS dependencies call `require`; an ES module has none of its own.
const requireShim = "import { createRequire as __tollgateRequire } from 'node:module'; const require = __tollgateRequire(import.meta.url);"

/**
 * Bundles `entry` and the store worker (`worker`, by default this checkout's) into `outdir`; returns
 * the bundled entry's path. `outdir` must sit inside a checkout: better-sqlite3 is resolved from there.
 */
export const bundle = async (entry, outdir, worker = join(root, "src/store/storeWorker.ts")) => {
  const common = {
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    external: ["better-sqlite3"],
    banner: { js: requireShim },
    sourcemap: "linked",
    sourcesContent: false,
    logLevel: "warning"
  }
  const out = join(outdir, basename(entry).replace(/\.ts$/, ".mjs"))
  await Promise.all([
    build({ ...common, entryPoints: [entry], outfile: out }),
    build({ ...common, entryPoints: [worker], outfile: join(outdir, "storeWorker.mjs") }),
    writeDocsPage(outdir) // the /docs page beside the bundle, not in it (src/http/docs.ts)
  ])
  return out
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const entry = resolve(process.argv[2] ?? join(root, "src/main.ts"))
  const outdir = resolve(process.argv[3] ?? join(root, "dist"))
  await bundle(entry, outdir, process.argv[4] === undefined ? undefined : resolve(process.argv[4]))
}
