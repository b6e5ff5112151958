/**
 * The JSON depth scanner of src/http/body.ts: it must see the depth JSON.parse would build, whatever
 * brackets, quotes and escapes strings hold, and however the bytes are split into chunks. And the
 * body reader around it, on a real loopback server: what it leaves on the request once it answered.
 */
import fc from "fast-check"
import { createServer, request } from "node:http"
import type { AddressInfo } from "node:net"
import { describe, expect, it } from "vitest"
import { closeIfUnread, makeDepthScanner, readJsonBody } from "../../src/http/body.ts"

const depthOf = (v: unknown): number =>
  Array.isArray(v) ? 1 + Math.max(0, ...v.map(depthOf)) : v !== null && typeof v === "object" ? 1 + Math.max(0, ...Object.values(v).map(depthOf)) : 0

const scanFits = (text: string, maxDepth: number, cuts: ReadonlyArray<number>): boolean => {
  const bytes = Buffer.from(text)
  const scanner = makeDepthScanner(maxDepth)
  let at = 0
  for (const cut of [...cuts.map((c) => c % (bytes.length + 1))].sort((a, b) => a - b)) {
    if (!scanner.feed(bytes.subarray(at, cut))) return false
    at = cut
  }
  return scanner.feed(bytes.subarray(at))
}

const tricky = fc.oneof(fc.constantFrom("[[[[", "]]]]", "{\"", "\\", "\\\"[", "\"]\"", "漢[字", "😀{"), fc.string())

describe("makeDepthScanner", () => {
  it("property: a JSON text fits a limit exactly when JSON.parse's value is nested no deeper, in any chunking", () => {
    const value = fc.letrec((tie) => ({
      node: fc.oneof({ depthSize: "small" }, tricky, fc.integer(), fc.constant(null), fc.array(tie("node"), { maxLength: 3 }), fc.dictionary(tricky, tie("node"), { maxKeys: 3 }))
    })).node
    fc.assert(
      fc.property(value, fc.nat({ max: 8 }), fc.array(fc.nat(), { maxLength: 4 }), (v, limit, cuts) => {
        const text = JSON.stringify(v)
        expect(scanFits(text, limit, cuts)).toBe(depthOf(JSON.parse(text)) <= limit)
      }),
      { numRuns: 500 }
    )
  })
})

describe("readJsonBody", () => {
  /** POST `chunks` to `port` chunked (no Content-Length, so the limit is met in the reader): the status. */
  const post = (port: number, chunks: ReadonlyArray<string>): Promise<number> =>
    new Promise((resolve, reject) => {
      const req = request({ host: "127.0.0.1", port, method: "POST", path: "/", headers: { "content-type": "application/json" } }, (res) => {
        res.resume()
        resolve(res.statusCode ?? 0)
      })
      req.on("error", reject)
      for (const c of chunks) req.write(c)
      req.end()
    })

  it("takes its listeners off the request once it answered — a body read whole, a body refused as too large — and a later 'error' meets a listener that swallows it", async () => {
    const seen: Array<{ readonly ok: boolean; readonly data: number; readonly end: number; readonly error: number }> = []
    const server = createServer((req, res) => {
      const before = { data: req.listenerCount("data"), end: req.listenerCount("end"), error: req.listenerCount("error") }
      readJsonBody(req, { maxBodyBytes: 64, maxJsonDepth: 8 }, (r) => {
        seen.push({
          ok: r.ok,
          data: req.listenerCount("data") - before.data,
          end: req.listenerCount("end") - before.end,
          error: req.listenerCount("error") - before.error
        })
        // Emitted with no listener, an 'error' would be thrown here.
        req.emit("error", new Error("a late error of the request"))
        closeIfUnread(res)
        res.writeHead(r.ok ? 200 : 413).end()
      })
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    try {
      const { port } = server.address() as AddressInfo
      expect(await post(port, ['{"a":', "[1,2]}"])).toBe(200)
      expect(await post(port, ["[", "1,".repeat(40), "1]"])).toBe(413)
    } finally {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    }
    expect(seen).toEqual([
      { ok: true, data: 0, end: 0, error: 1 },
      { ok: false, data: 0, end: 0, error: 1 }
    ])
  })
})
