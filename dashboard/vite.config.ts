/**
 * Builds the dashboard (dashboard/src) into dashboard/dist, served by Tollgate at /dashboard
 * (src/http/dashboard.ts). Run by `npm ci` (prepare) and `npm start` (prestart, when stale).
 */
import { fileURLToPath } from "node:url"
import { defineConfig } from "vite"

/** The package @tollgate/spec as a browser gets it: its browser build (scripts/build-spec.mjs, run first by `npm ci`). */
const specPackage = fileURLToPath(new URL("../spec/dist/web/index.js", import.meta.url))

export default defineConfig({
  root: fileURLToPath(new URL(".", import.meta.url)),
  base: "/dashboard/",
  logLevel: "warn",
  esbuild: { jsx: "automatic", jsxImportSource: "preact" },
  resolve: { alias: { "@tollgate/spec": specPackage } },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    // No data: URLs and no inline module-preload polyfill: everything is a file the CSP allows as 'self'.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    reportCompressedSize: false
  }
})
