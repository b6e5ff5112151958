#!/usr/bin/env node
// Builds the dashboard (dashboard/ → dashboard/dist) with Vite. Run by `npm ci` (prepare) and, with
// --if-stale, by `npm start` (prestart): then it builds only when a source is newer than the build.
import { existsSync, readdirSync, statSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

const root = fileURLToPath(new URL("../dashboard/", import.meta.url))
const built = join(root, "dist", "index.html")

const newest = (dir) =>
  readdirSync(dir).reduce((t, name) => {
    if (name === "dist" || name === "node_modules") return t
    const path = join(dir, name)
    const s = statSync(path)
    return Math.max(t, s.isDirectory() ? newest(path) : s.mtimeMs)
  }, 0)

if (process.argv.includes("--if-stale") && existsSync(built)) {
  const specBuild = fileURLToPath(new URL("../spec/dist/web/index.js", import.meta.url))
  const sources = Math.max(newest(root), existsSync(specBuild) ? statSync(specBuild).mtimeMs : Infinity)
  if (statSync(built).mtimeMs >= sources) process.exit(0)
}

const { build } = await import("vite")
const started = Date.now()
await build({ configFile: join(root, "vite.config.ts") })
console.log(`dashboard built into dashboard/dist in ${Date.now() - started} ms`)
