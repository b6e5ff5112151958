/**
 * A governed bench target runs as `npm start` runs the server: bundled by its checkout's
 * scripts/build.mjs with the store worker beside it, started with the node flags of that checkout's
 * `npm start` line (so its RSS, start-up and GC are the production ones). Shared by bench/run.ts,
 * bench/threads.ts and bench/pairs.ts.
 */
import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { basename, join } from "node:path"

/**
 * Bundle `dir`/bench/`script` into `dir`/.tollgate/bench-dist/`name` with that checkout's own build
 * script (a `--compare` checkout is bundled as its `npm start` would bundle it, not with this tree's
 * build options), and answer the entry to run. The bundle uses the checkout's node_modules.
 */
export const bundleTarget = (dir: string, script: string, name: string): string => {
  const outdir = join(dir, ".tollgate", "bench-dist", name)
  const entry = join(dir, "bench", script)
  execFileSync(process.execPath, [join(dir, "scripts/build.mjs"), entry, outdir, join(dir, "src/store/storeWorker.ts")], { stdio: "inherit" })
  return join(outdir, basename(script).replace(/\.ts$/, ".mjs"))
}

/** The node flags of a checkout's `npm start` line (e.g. the V8 heap flags of docs/decisions/0016). */
export const startFlags = (dir: string): ReadonlyArray<string> => {
  const start = (JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { scripts?: { start?: string } }).scripts?.start ?? ""
  return start.split(/\s+/).filter((t) => t.startsWith("--"))
}
