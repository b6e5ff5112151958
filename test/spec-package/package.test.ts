/**
 * The package @tollgate/spec as a customer gets it (issue 43, item 1): `npm pack` in spec/ (its
 * prepack builds spec/dist), the tarball installed with npm into a temporary folder outside the
 * repository (offline: its two dependencies, @noble/ed25519 and @noble/hashes, packed from the
 * repository's node_modules and installed beside it), then
 *   - imported there by plain `node` (the "node" export: node:crypto) and by `node --conditions=browser`
 *     (the "browser" export: pure JavaScript), each verifying a real receipt, a Merkle inclusion proof
 *     against a signed checkpoint, and a whole export with `Verify.verifyRecords`;
 *   - bundled from that folder by esbuild for the browser and run in headless Chromium, served from a
 *     loopback server, verifying the same things.
 * The receipt, the export and the checkpoint are made here by the gateway's own code (spec/ sources),
 * so the package must agree with the repository byte for byte. Each run also has a tampered receipt,
 * which every build must refuse: a check that always said yes would fail here.
 */
import { execFileSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { build } from "esbuild"
import { chromium } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { inclusionProof, receiptLeafHash } from "../../spec/merkle.ts"
import { toBase64 } from "../../spec/platform.ts"
import { checkpointOf, chainBodies, exportHeader, makeKey } from "../verify/exportFixture.ts"

const root = resolve(import.meta.dirname, "../..")
const dir = mkdtempSync(join(tmpdir(), "tollgate-spec-package-"))
const app = join(dir, "app")
let tarball = ""

// The inputs: a chain of 9 receipts, its export, a checkpoint of all 9, the proof of receipt 4.
const key = makeKey()
const chain = [...chainBodies({ key, count: 9 })]
const leaves = chain.map((c) => receiptLeafHash(c.hash))
const inputs = {
  receipt: JSON.parse(chain[3]!.body) as Record<string, unknown>,
  tampered: { ...(JSON.parse(chain[3]!.body) as Record<string, unknown>), credits_charged: 987_654 },
  publicKey: key.entry.public_key,
  keyId: key.entry.id,
  exportText: [exportHeader(key), ...chain.map((c) => c.body)].map((l) => `${l}\n`).join(""),
  checkpoint: checkpointOf(key, chain.map((c) => c.hash)),
  proof: { leaf_index: 3, tree_size: 9, hashes: inclusionProof(leaves, 3, 9).map(toBase64) }
}

/** The check every build runs, as plain JavaScript over the package's public API (`spec` is the package). */
const CHECK = `
const b64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
export const check = (spec, inputs) => {
  const { Receipt, Merkle, Checkpoint, Ed25519, Export, Verify } = spec;
  const receiptOk = Receipt.verifyReceipt(inputs.receipt, inputs.publicKey);
  const tamperedOk = Receipt.verifyReceipt(inputs.tampered, inputs.publicKey);
  const raw = Ed25519.rawOfSpkiPem(inputs.publicKey);
  const opened = Checkpoint.openCheckpoint(inputs.checkpoint, [Checkpoint.noteVerifier(inputs.keyId, raw)], Checkpoint.originOf(inputs.receipt.project_id));
  const leaf = Merkle.receiptLeafHash(inputs.receipt.hash);
  const proof = inputs.proof.hashes.map(b64);
  const included = opened._tag === "Opened" && Merkle.verifyInclusion(inputs.proof.leaf_index, inputs.proof.tree_size, leaf, proof, opened.checkpoint.rootHash);
  const wrongLeaf = opened._tag === "Opened" && Merkle.verifyInclusion(inputs.proof.leaf_index, inputs.proof.tree_size, Merkle.receiptLeafHash(inputs.tampered.prev_hash), proof, opened.checkpoint.rootHash);
  const { findings, summary } = Verify.verifyRecords(Export.readExport(inputs.exportText), { checkpoints: [inputs.checkpoint] });
  return {
    receiptFailed: [...receiptOk], tamperedFailed: [...tamperedOk], keyId: Ed25519.receiptKeyIdOfPem(inputs.publicKey),
    checkpoint: opened._tag, included, wrongLeaf,
    exportFindings: findings.map((f) => f.kind), exportReceipts: summary.receipts
  };
};
`

const EXPECTED = {
  receiptFailed: [],
  tamperedFailed: ["hash", "signature"],
  keyId: inputs.keyId,
  checkpoint: "Opened",
  included: true,
  wrongLeaf: false,
  exportFindings: [],
  exportReceipts: 9
}

const run = (cmd: string, args: ReadonlyArray<string>, cwd: string): string => execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] })

let server: Server | undefined
afterAll(() => {
  server?.close()
  rmSync(dir, { recursive: true, force: true })
})

beforeAll(() => {
  const npm = "npm"
  const packed = JSON.parse(run(npm, ["pack", "--json", "--pack-destination", dir], join(root, "spec"))) as Array<{ filename: string; size: number; unpackedSize: number; entryCount: number }>
  tarball = join(dir, packed[0]!.filename)
  const deps = ["@noble/ed25519", "@noble/hashes"].map((d) => {
    const [p] = JSON.parse(run(npm, ["pack", "--json", "--pack-destination", dir, join(root, "node_modules", d)], dir)) as Array<{ filename: string }>
    return join(dir, p!.filename)
  })
  run("mkdir", ["-p", app], dir)
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "customer", version: "1.0.0", private: true, type: "module" }))
  run(npm, ["install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", ...deps, tarball], app)
  writeFileSync(join(app, "check.mjs"), CHECK)
  writeFileSync(join(app, "inputs.json"), JSON.stringify(inputs))
  writeFileSync(
    join(app, "main.mjs"),
    `import * as spec from "@tollgate/spec"; import { check } from "./check.mjs"; import { readFileSync } from "node:fs";
process.stdout.write(JSON.stringify(check(spec, JSON.parse(readFileSync("inputs.json", "utf8")))));`
  )
  process.stdout.write(`@tollgate/spec tarball: ${packed[0]!.size} bytes packed, ${packed[0]!.unpackedSize} unpacked, ${packed[0]!.entryCount} files\n`)
}, 120_000)

describe("@tollgate/spec, packed and installed outside the repository", { timeout: 120_000 }, () => {
  it("the tarball holds the builds and declarations, no sources, no tests", () => {
    const files = run("tar", ["-tzf", tarball], dir).trim().split("\n").sort()
    expect(files).toContain("package/dist/node/index.js")
    expect(files).toContain("package/dist/web/index.js")
    expect(files).toContain("package/dist/types/index.d.ts")
    expect(files).toContain("package/README.md")
    expect(files.filter((f) => /\.ts$/.test(f) && !f.endsWith(".d.ts"))).toEqual([])
    const web = readFileSync(join(app, "node_modules/@tollgate/spec/dist/web/index.js"), "utf8")
    expect(web).not.toMatch(/from "node:/)
  })

  it("plain node imports it (the node export) and verifies the receipt, the proof and the export", () => {
    expect(JSON.parse(run(process.execPath, ["main.mjs"], app))).toEqual(EXPECTED)
  })

  it("node with the browser condition takes the pure-JavaScript build and gives the same answers", () => {
    expect(JSON.parse(run(process.execPath, ["--conditions=browser", "main.mjs"], app))).toEqual(EXPECTED)
  })

  it("headless Chromium runs the browser bundle, served from loopback, with the same answers", async () => {
    writeFileSync(join(app, "browser.mjs"), `import * as spec from "@tollgate/spec"; import { check } from "./check.mjs"; window.__check = (inputs) => check(spec, inputs);`)
    await build({ entryPoints: [join(app, "browser.mjs")], bundle: true, format: "esm", platform: "browser", outfile: join(app, "bundle.js"), logLevel: "silent", absWorkingDir: app })
    const bundle = readFileSync(join(app, "bundle.js"))
    const page = `<!doctype html><meta charset="utf-8"><script type="module" src="/bundle.js"></script>`
    server = createServer((req, res) => {
      if (req.url === "/bundle.js") res.writeHead(200, { "content-type": "text/javascript" }).end(bundle)
      else res.writeHead(200, { "content-type": "text/html" }).end(page)
    })
    await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r))
    const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--headless", "--no-sandbox", "--disable-gpu"] })
    try {
      const tab = await browser.newPage()
      const errors: Array<string> = []
      tab.on("pageerror", (e) => errors.push(e.message))
      await tab.goto(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`)
      await tab.waitForFunction(() => typeof (globalThis as unknown as { __check?: unknown }).__check === "function")
      const result = await tab.evaluate((i) => (globalThis as unknown as { __check: (x: unknown) => unknown }).__check(i), inputs)
      expect(errors).toEqual([])
      expect(result).toEqual(EXPECTED)
      // No Node in the page: the bundle did not reach for Buffer or node: modules.
      expect(await tab.evaluate(() => typeof (globalThis as { Buffer?: unknown }).Buffer)).toBe("undefined")
    } finally {
      await browser.close()
    }
  })
})
