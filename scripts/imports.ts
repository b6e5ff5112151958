/**
 * The import graph of src/ and spec/, by layer, and the edges that point the wrong way.
 *
 * Layers, top to bottom (docs/architecture.md, "Layers"): an import may only point to a lower layer
 * or stay inside its own; `store` and `providers` sit side by side and do not import each other.
 *
 *   entry      src/main.ts, src/server.ts, src/cli/        (composition roots: wire everything)
 *   http       src/http/
 *   services   src/services/
 *   store      src/store/          providers   src/providers/
 *   domain     src/domain/
 *   spec       spec/               (imports nothing of src/)
 *
 * `npm run imports` prints the graph (layer → layer with counts, then every upward edge, if any);
 * test/architecture/imports.test.ts fails on an upward edge.
 */
import { readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"
import { fileURLToPath } from "node:url"

export type Layer = "entry" | "http" | "services" | "store" | "providers" | "domain" | "spec"

const RANK: Record<Layer, number> = { entry: 5, http: 4, services: 3, store: 2, providers: 2, domain: 1, spec: 0 }

export const layerOf = (file: string): Layer | undefined => {
  if (file.startsWith("spec/")) return "spec"
  if (file === "src/main.ts" || file === "src/server.ts" || file.startsWith("src/cli/")) return "entry"
  const m = /^src\/(http|services|store|providers|domain)\//.exec(file)
  return m === null ? undefined : (m[1] as Layer)
}

/** Whether an import from layer `from` to layer `to` points down (or stays inside its layer). */
export const allowed = (from: Layer, to: Layer): boolean => from === to || RANK[to] < RANK[from]

export interface Edge {
  readonly from: string
  readonly to: string
}

const SOURCE = /\.(ts|mts|mjs)$/
// Static imports and re-exports (`import … from "x"`, `export … from "x"`, `import "x"`) and dynamic `import("x")`.
const SPECIFIERS = /(?:\bfrom\s*|\bimport\s*\(?\s*)["']([^"']+)["']/g

const filesUnder = (root: string, dir: string): Array<string> =>
  readdirSync(join(root, dir)).flatMap((name) => {
    const path = join(dir, name)
    return statSync(join(root, path)).isDirectory() ? filesUnder(root, path) : SOURCE.test(name) ? [path] : []
  })

/** Every relative import between files of src/ and spec/ (paths relative to `root`, with `/`). */
export const importEdges = (root: string): ReadonlyArray<Edge> => {
  const files = [...filesUnder(root, "src"), ...filesUnder(root, "spec")]
  const edges: Array<Edge> = []
  for (const file of files) {
    const text = readFileSync(join(root, file), "utf8")
    for (const m of text.matchAll(SPECIFIERS)) {
      const spec = m[1]!
      if (!spec.startsWith(".")) continue
      const to = relative(root, resolve(root, dirname(file), spec)).split("\\").join("/")
      edges.push({ from: file.split("\\").join("/"), to })
    }
  }
  return edges
}

/** The edges that break the layering: upward, sideways between store and providers, or out of the layers. */
export const upwardEdges = (edges: ReadonlyArray<Edge>): ReadonlyArray<Edge & { readonly fromLayer: string; readonly toLayer: string }> =>
  edges.flatMap((e) => {
    const from = layerOf(e.from)
    const to = layerOf(e.to)
    if (from === undefined || to === undefined) return [{ ...e, fromLayer: from ?? "?", toLayer: to ?? "?" }]
    return allowed(from, to) ? [] : [{ ...e, fromLayer: from, toLayer: to }]
  })

/** The graph by layer: "from → to: n" lines, highest layers first. */
export const layerGraph = (edges: ReadonlyArray<Edge>): ReadonlyArray<string> => {
  const counts = new Map<string, number>()
  for (const e of edges) {
    const key = `${layerOf(e.from) ?? "?"} → ${layerOf(e.to) ?? "?"}`
    counts.set(key, (counts.get(key) ?? 0) + 1)
  }
  const rank = (l: string) => RANK[l as Layer] ?? -1
  return [...counts.entries()]
    .sort(([a], [b]) => {
      const [af, at] = a.split(" → ") as [string, string]
      const [bf, bt] = b.split(" → ") as [string, string]
      return rank(bf) - rank(af) || af.localeCompare(bf) || rank(bt) - rank(at) || at.localeCompare(bt)
    })
    .map(([k, n]) => `${k}: ${n}`)
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = resolve(dirname(fileURLToPath(import.meta.url)), "..")
  const edges = importEdges(root)
  const verbose = process.argv.includes("--files")
  process.stdout.write(`import graph of src/ and spec/ (${edges.length} edges), by layer:\n`)
  for (const line of layerGraph(edges)) process.stdout.write(`  ${line}\n`)
  if (verbose) for (const e of edges) process.stdout.write(`  ${e.from} → ${e.to}\n`)
  const upward = upwardEdges(edges)
  if (upward.length === 0) process.stdout.write("no upward edge\n")
  else {
    process.stdout.write(`${upward.length} upward edge(s):\n`)
    for (const e of upward) process.stdout.write(`  ${e.from} (${e.fromLayer}) → ${e.to} (${e.toLayer})\n`)
    process.exitCode = 1
  }
}
