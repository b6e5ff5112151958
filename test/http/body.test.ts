/**
 * The JSON depth scanner of src/http/body.ts: it must see the depth JSON.parse would build, whatever
 * brackets, quotes and escapes strings hold, and however the bytes are split into chunks. And the
 * body reader around it, on a real loopback server: what it leaves on the request once it answered.
 */
import fc from "fast-check"
import { createServer, request } from "node:http"
import { connect } from "node:net"
import type { AddressInfo } from "node:net"
import { describe, expect, it } from "vitest"
import { closeIfUnread, type Linger, makeDepthScanner, readJsonBody } from "../../src/http/body.ts"

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

describe("closeIfUnread: a lingering close after an early answer", () => {
  /**
   * A server answering 413 before reading the body, lingering within `linger`; a client that declares
   * 1 GiB and keeps sending after the server's FIN (1 KiB every 10 ms, or 64 KiB as fast as taken),
   * as a client sending its whole body before reading would: the answer it read, and when the
   * server's socket closed, from the answer.
   */
  const run = async (linger: Linger, pace: "slow" | "fast") => {
    let closedAfter = (_ms: number) => {}
    const closed = new Promise<number>((resolve) => (closedAfter = resolve))
    const server = createServer((_req, res) => {
      // Measured from before the linger is armed: its timer cannot end before `linger.ms` from here.
      const answeredAt = performance.now()
      closeIfUnread(res, linger)
      res.socket!.once("close", () => closedAfter(performance.now() - answeredAt))
      res.writeHead(413).end("too large")
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    const socket = connect({ port: (server.address() as AddressInfo).port, host: "127.0.0.1", allowHalfOpen: true })
    let answer = ""
    socket.on("data", (d) => (answer += d.toString("latin1")))
    socket.on("error", () => {})
    socket.write(`POST / HTTP/1.1\r\nhost: x\r\ncontent-length: ${2 ** 30}\r\n\r\n`)
    const chunk = Buffer.alloc(pace === "slow" ? 1024 : 64 * 1024)
    const pump = () => {
      while (socket.writable) if (!socket.write(chunk)) return socket.once("drain", pump)
    }
    const trickle = pace === "slow" ? setInterval(() => socket.writable && socket.write(chunk), 10) : (pump(), undefined)
    const afterMs = await closed
    clearInterval(trickle)
    socket.destroy()
    server.close()
    return { status: Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1]), afterMs }
  }

  it("an endless slow body is read after the answer for linger.ms, then cut off; the client has its answer", async () => {
    const r = await run({ ms: 300, bytes: 2 ** 30 }, "slow")
    expect(r.status).toBe(413)
    expect(r.afterMs).toBeGreaterThanOrEqual(290)
    expect(r.afterMs).toBeLessThan(1500)
  })

  it("an endless fast body is cut off once linger.bytes were drained, long before linger.ms", async () => {
    const r = await run({ ms: 60_000, bytes: 4 * 1024 * 1024 }, "fast")
    expect(r.status).toBe(413)
    expect(r.afterMs).toBeLessThan(5000)
  })
})
