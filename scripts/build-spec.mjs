#!/usr/bin/env node
/**
 * Builds the rulebook package @tollgate/spec (spec/package.json) into spec/dist:
 *
 *   spec/dist/node/index.js   ESM, SHA-256 and Ed25519 by node:crypto (spec/platform.ts)
 *   spec/dist/web/index.js    ESM, the same code with spec/platform.web.ts in its place: @noble/hashes,
 *                             @noble/ed25519 (left as imports: they are the package's dependencies)
 *   spec/dist/types/*.d.ts    declarations, emitted by tsc from the same sources
 *
 * One bundle a build, from spec/index.ts; only the one platform file differs (`webPlatform`, also
 * used by the dashboard's Vite build). Run by `npm ci` (the root `prepare`) and by `npm pack` in
 * spec/ (its own `prepack`), so the package's dist is never older than its sources there.
 *
 *   node scripts/build-spec.mjs
 */
import { build } from "esbuild"
import { execFileSync } from "node:child_process"
import { rmSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..")
const spec = join(root, "spec")
const dist = join(spec, "dist")

/** The esbuild plugin that puts spec/platform.web.ts where spec/platform.ts is imported. */
export const webPlatform = {
  name: "tollgate-spec-web-platform",
  setup(b) {
    b.onResolve({ filter: /(^|\/)platform\.ts$/ }, (args) =>
      resolve(args.resolveDir, args.path) === join(spec, "platform.ts") ? { path: join(spec, "platform.web.ts") } : undefined
    )
  }
}

const common = {
  entryPoints: [join(spec, "index.ts")],
  bundle: true,
  format: "esm",
  target: "es2022",
  external: ["@noble/ed25519", "@noble/hashes", "@noble/hashes/*", "node:*"],
  legalComments: "none",
  logLevel: "warning"
}

rmSync(dist, { recursive: true, force: true })
await build({ ...common, platform: "node", outfile: join(dist, "node", "index.js") })
await build({ ...common, platform: "browser", outfile: join(dist, "web", "index.js"), plugins: [webPlatform] })

// Declarations: tsc over the same entry, `.ts` specifiers rewritten to `.js`.
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc")
const tsconfig = join(dist, "tsconfig.types.json")
writeFileSync(
  tsconfig,
  JSON.stringify({
    extends: join(root, "tsconfig.json"),
    compilerOptions: {
      noEmit: false,
      declaration: true,
      emitDeclarationOnly: true,
      rewriteRelativeImportExtensions: true,
      rootDir: spec,
      outDir: join(dist, "types"),
      types: ["node"]
    },
    include: [],
    files: [join(spec, "index.ts")]
  })
)
execFileSync(process.execPath, [tsc, "-p", tsconfig], { stdio: ["ignore", 2, 2] })
rmSync(tsconfig)
// stderr: `npm pack --json` (which runs this as prepack) keeps stdout for its JSON.
process.stderr.write("@tollgate/spec built into spec/dist\n")
