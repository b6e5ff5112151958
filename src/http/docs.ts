/**
 * GET /docs: the Scalar page of ./scalarPage.ts without its ≈ 3.4 MB script in the server's memory.
 * The built server (dist/main.mjs) reads the page the build rendered beside it (dist/docs.html) from
 * disk on each request; run from source (tests, `npm run dev`) there is no such file and the page is
 * built on the first request by importing ./scalarPage.ts, then kept. The import's specifier is a
 * variable so that esbuild leaves that module (and the script) out of the bundle.
 */
import { HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { existsSync } from "node:fs"
import { readFile } from "node:fs/promises"
import { fileURLToPath } from "node:url"

const builtPage = fileURLToPath(new URL("./docs.html", import.meta.url))

const pageModule = "./scalarPage.ts"

const fromSource = Effect.runSync(
  Effect.cached(Effect.flatMap(Effect.promise(() => import(pageModule) as Promise<typeof import("./scalarPage.ts")>), (m) => m.scalarPage))
)

export const docsPage = existsSync(builtPage)
  ? Effect.map(Effect.promise(() => readFile(builtPage)), (page) => HttpServerResponse.uint8Array(page, { contentType: "text/html" }))
  : fromSource
