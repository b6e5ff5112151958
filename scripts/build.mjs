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
import { mkdir, writeFile } from "node:fs/promises"
import { fileURLToPath } from "node:url"
import { basename, dirname, join, resolve } from "node:path"
import { writeDocsPage } from "./build-docs.mjs"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..")

// Bundled CommonJS dependencies call `require`; an ES module has none of its own.
const requireShim = "import { createRequire as __tollgateRequire } from 'node:module'; const require = __tollgateRequire(import.meta.url);"

/** The o200k tokenizer's ranks: the one encoding Tollgate counts with (src/services/Tokenizer.ts). */
const RANKS_MODULE = /gpt-tokenizer[\\/]esm[\\/]bpeRanks[\\/]o200k_base\.js$/
const RANKS_FILE = "o200k_base.json"

/**
 * gpt-tokenizer ships its 200,000 ranks as one JavaScript array literal (2.4 MB of source, 3.3 MB
 * escaped in the bundle). Parsed as code it costs the parser's memory for the literal (peak malloc
 * 37 MB at start, not given back) and its source for the life of the process; read with JSON.parse
 * from a file beside the bundle, `npm start` idles ≈ 35 MB lower (docs/decisions/0016-memory.md).
 * Same ranks, same library around them: only the bundle's copy of that one module is replaced by a
 * read of its JSON (test/start/bundledStart.test.ts checks the JSON against the package's array).
 */
const ranksAsJson = {
  name: "o200k-ranks-as-json",
  setup(b) {
    b.onLoad({ filter: RANKS_MODULE }, () => ({
      contents: `import { readFileSync } from "node:fs"\nexport default JSON.parse(readFileSync(new URL("./${RANKS_FILE}", import.meta.url), "utf8"))\n`,
      loader: "js"
    }))
  }
}

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
    // V8 keeps a module's source for its life: without whitespace and with simpler syntax it is
    // ≈ 1 MB smaller, ≈ 5 MB of idle RSS. Identifiers are not minified.
    // No keepNames: it wraps every named closure in a defineProperty at each creation (≈ 40 a governed
    // call, most inside effect), ≈ 110 µs of CPU a call (docs/decisions/0024). Errors name themselves
    // by their tag, not by their class's JavaScript name (a name esbuild renames on a clash).
    minifyWhitespace: true,
    minifySyntax: true,
    logLevel: "warning"
  }
  const out = join(outdir, basename(entry).replace(/\.ts$/, ".mjs"))
  const { default: ranks } = await import("gpt-tokenizer/bpeRanks/o200k_base")
  await mkdir(outdir, { recursive: true })
  await Promise.all([
    writeFile(join(outdir, RANKS_FILE), JSON.stringify(ranks)),
    build({ ...common, entryPoints: [entry], outfile: out, plugins: [ranksAsJson] }),
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
