/**
 * Issue 19, finding 4 (and the 431 of finding 7): after answering 401 or 413 the server kept reading
 * the request body (one unauthenticated connection streamed ≈ 1 GB/s into it, never closed); slow
 * heads and bodies were held for node's 300 s; a 64 KB header got node's empty, non-JSON 431. Now an
 * early answer closes the connection, the server's timeouts are set, and every such error is an
 * OpenAI-shaped JSON body with a stable code.
 */
import { connect, type Socket } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { useMockedGateway } from "../support/gateway.ts"

interface Exchange {
  /** Everything the server sent. */
  readonly response: string
  /** Bytes of body the client managed to write before the server closed the connection. */
  readonly bodyBytesWritten: number
  /** The server closed the connection (within `waitMs`). */
  readonly closed: boolean
  readonly closedAfterMs: number
}

/**
 * Send `head` on a raw connection, then (when `stream` is set) body bytes as fast as the server takes
 * them, until the server closes the connection or `waitMs` pass.
 */
const exchange = (port: number, head: string, opts: { readonly stream?: boolean; readonly chunked?: boolean; readonly waitMs: number; readonly tail?: string }): Promise<Exchange> =>
  new Promise((resolve) => {
    const socket: Socket = connect(port, "127.0.0.1")
    const t0 = performance.now()
    let response = ""
    let written = 0
    let closed = false
    const chunk = Buffer.alloc(64 * 1024, "a")
    const framed = opts.chunked ? Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from("\r\n")]) : chunk
    const done = () => {
      clearTimeout(timer)
      resolve({ response, bodyBytesWritten: written, closed, closedAfterMs: performance.now() - t0 })
    }
    const timer = setTimeout(() => {
      socket.destroy()
      done()
    }, opts.waitMs)
    socket.on("data", (d) => (response += d.toString("latin1")))
    socket.on("error", () => {})
    socket.on("close", () => {
      if (closed) return
      closed = true
      done()
    })
    const pump = () => {
      while (!socket.destroyed && socket.writable) {
        written += chunk.length
        if (!socket.write(framed)) return socket.once("drain", pump)
      }
    }
    socket.on("connect", () => {
      socket.write(head)
      if (opts.tail !== undefined) socket.write(opts.tail)
      if (opts.stream) pump()
    })
  })

const statusOf = (response: string) => Number(/^HTTP\/1\.1 (\d{3})/.exec(response)?.[1])
const headerOf = (response: string, name: string) => new RegExp(`\r\n${name}: ([^\r]*)`, "i").exec(response)?.[1]
const errorOf = (response: string) => (JSON.parse(response.slice(response.indexOf("\r\n\r\n") + 4)) as { error: Record<string, unknown> }).error

describe("a connection is never held for a body the gateway refused (finding 4)", () => {
  const env = useMockedGateway({ beforeAll, afterAll }, undefined, { maxBodyBytes: 256 * 1024, headersTimeoutMs: 1000, requestTimeoutMs: 2000 })
  const port = () => Number(new URL(env.gateway.origin).port)
  const head = (path: string, headers: Record<string, string>) =>
    `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("")}\r\n`

  it("401 before the body (no key, 1 GiB announced): JSON 401, Connection: close, the server closes the connection at once", async () => {
    const r = await exchange(port(), head("/v1/chat/completions", { "content-length": String(2 ** 30) }), { stream: true, waitMs: 5000 })
    console.log(`[finding 4] 401: closed ${r.closed} after ${r.closedAfterMs.toFixed(0)} ms, ${(r.bodyBytesWritten / 1024).toFixed(0)} KiB of body written`)
    expect(statusOf(r.response)).toBe(401)
    expect(headerOf(r.response, "connection")).toBe("close")
    expect(errorOf(r.response)).toMatchObject({ code: "invalid_api_key" })
    expect(r.closed).toBe(true)
    expect(r.bodyBytesWritten).toBeLessThan(64 * 1024 * 1024)
  })

  it("413 on the announced length (a valid key): JSON 413, Connection: close, closed", async () => {
    const r = await exchange(port(), head("/v1/chat/completions", { authorization: `Bearer ${env.gateway.devKey}`, "content-length": String(2 ** 30) }), { stream: true, waitMs: 5000 })
    console.log(`[finding 4] 413 (declared): closed ${r.closed} after ${r.closedAfterMs.toFixed(0)} ms, ${(r.bodyBytesWritten / 1024).toFixed(0)} KiB written`)
    expect(statusOf(r.response)).toBe(413)
    expect(headerOf(r.response, "connection")).toBe("close")
    expect(errorOf(r.response)).toMatchObject({ code: "request_too_large" })
    expect(r.closed).toBe(true)
  })

  it("413 on a chunked body that grows past the limit: JSON 413, closed", async () => {
    const r = await exchange(port(), head("/v1/chat/completions", { authorization: `Bearer ${env.gateway.devKey}`, "transfer-encoding": "chunked" }), { stream: true, chunked: true, waitMs: 5000 })
    console.log(`[finding 4] 413 (chunked): closed ${r.closed} after ${r.closedAfterMs.toFixed(0)} ms, ${(r.bodyBytesWritten / 1024).toFixed(0)} KiB written`)
    expect(statusOf(r.response)).toBe(413)
    expect(headerOf(r.response, "connection")).toBe("close")
    expect(r.closed).toBe(true)
  })

  it("the Effect-served endpoints too: a wrong admin token with a large body is a JSON 401 and a closed connection", async () => {
    const r = await exchange(port(), head("/admin/v1/projects", { authorization: "Bearer wrong", "content-length": String(2 ** 30) }), { stream: true, waitMs: 5000 })
    expect(statusOf(r.response)).toBe(401)
    expect(headerOf(r.response, "connection")).toBe("close")
    expect(errorOf(r.response)).toMatchObject({ code: "invalid_admin_token" })
    expect(r.closed).toBe(true)
  })

  it("a slow head (slowloris) gets a JSON 408 and is closed after headersTimeout", async () => {
    const r = await exchange(port(), "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n", { waitMs: 6000 })
    console.log(`[finding 4] slow head: ${statusOf(r.response)} and closed ${r.closed} after ${r.closedAfterMs.toFixed(0)} ms (headersTimeout 1000 ms)`)
    expect(statusOf(r.response)).toBe(408)
    expect(errorOf(r.response)).toMatchObject({ code: "request_timeout", type: "invalid_request_error" })
    expect(r.closed).toBe(true)
  })

  it("a slow body gets a JSON 408 and is closed after requestTimeout", async () => {
    const r = await exchange(port(), head("/v1/chat/completions", { authorization: `Bearer ${env.gateway.devKey}`, "content-length": "1000" }), { tail: '{"model":', waitMs: 8000 })
    console.log(`[finding 4] slow body: ${statusOf(r.response)} and closed ${r.closed} after ${r.closedAfterMs.toFixed(0)} ms (requestTimeout 2000 ms)`)
    expect(statusOf(r.response)).toBe(408)
    expect(errorOf(r.response)).toMatchObject({ code: "request_timeout" })
    expect(r.closed).toBe(true)
  })

  it("a 64 KB header: JSON 431 with a stable code (finding 7), closed", async () => {
    const r = await exchange(port(), head("/v1/chat/completions", { "x-padding": "p".repeat(64 * 1024), "content-length": "2" }), { tail: "{}", waitMs: 5000 })
    expect(statusOf(r.response)).toBe(431)
    expect(headerOf(r.response, "content-type")).toBe("application/json")
    expect(errorOf(r.response)).toMatchObject({ code: "request_header_fields_too_large", type: "invalid_request_error", param: null })
    expect(r.closed).toBe(true)
  })

  it("a malformed request: JSON 400", async () => {
    const r = await exchange(port(), "THIS IS NOT HTTP\r\n\r\n", { waitMs: 5000 })
    expect(statusOf(r.response)).toBe(400)
    expect(errorOf(r.response)).toMatchObject({ code: "invalid_request_error" })
  })

  it("a well-behaved client keeps its keep-alive connection after a complete request", async () => {
    const body = JSON.stringify({ model: "auto", messages: [{ role: "user", content: "hi" }] })
    const r = await exchange(port(), head("/v1/chat/completions", { authorization: `Bearer ${env.gateway.devKey}`, "content-length": String(Buffer.byteLength(body)) }), { tail: body, waitMs: 1500 })
    expect(statusOf(r.response)).toBe(200)
    expect(headerOf(r.response, "connection")).toBe("keep-alive")
    expect(r.closed).toBe(false)
  })
})
