/**
 * Issue 19, finding 4 (and the 431 of finding 7): after answering 401 or 413 the server kept reading
 * the request body (one unauthenticated connection streamed ≈ 1 GB/s into it, never closed); slow
 * heads and bodies were held for node's 300 s; a 64 KB header got node's empty, non-JSON 431. Now an
 * early answer closes the connection once a bounded drain ends, the server's timeouts are set, and
 * every such error is an OpenAI-shaped JSON body with a stable code.
 *
 * Issue 38, finding 6: closing at once with the body unread reset the connection, so a client still
 * sending never read the 413 (EPIPE, "fetch failed", and an SDK retry). The close now lingers: the
 * rest of the body is read and discarded until it ends, for at most LINGER.ms and LINGER.bytes.
 */
import { execFile } from "node:child_process"
import { connect, type Socket } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { LINGER } from "../../src/http/body.ts"
import { useMockedGateway } from "../support/gateway.ts"

interface Exchange {
  /** Everything the server sent. */
  readonly response: string
  /** Bytes of body the client managed to write before the server closed the connection. */
  readonly bodyBytesWritten: number
  /** The server closed the connection (within `waitMs`). */
  readonly closed: boolean
  readonly closedAfterMs: number
  /** The server half-closed gracefully (a FIN the client read), rather than resetting the connection. */
  readonly ended: boolean
  /** The socket's error, if any (ECONNRESET, EPIPE: the server reset the connection). */
  readonly error: string | undefined
}

/**
 * Send `head` on a raw connection, then (when `stream` is set) body bytes as fast as the server takes
 * them — `bodyBytes` of them, or without end —, or (`trickle`) 1 KiB every `trickle` ms without end,
 * until the server closes the connection or `waitMs` pass.
 */
const exchange = (
  port: number,
  head: string,
  opts: { readonly stream?: boolean; readonly chunked?: boolean; readonly bodyBytes?: number; readonly trickle?: number; readonly waitMs: number; readonly tail?: string }
): Promise<Exchange> =>
  new Promise((resolve) => {
    // Half-open allowed: like a client that sends its whole body before it reads, this one keeps
    // writing after the server's FIN; it ends its side once it has nothing more to send.
    const socket: Socket = connect({ port, host: "127.0.0.1", allowHalfOpen: true })
    const t0 = performance.now()
    let response = ""
    let written = 0
    let closed = false
    let ended = false
    let error: string | undefined
    const chunk = Buffer.alloc(opts.trickle === undefined ? 64 * 1024 : 1024, "a")
    const framed = opts.chunked ? Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from("\r\n")]) : chunk
    let trickling: NodeJS.Timeout | undefined
    const done = () => {
      clearTimeout(timer)
      clearInterval(trickling)
      resolve({ response, bodyBytesWritten: written, closed, closedAfterMs: performance.now() - t0, ended, error })
    }
    const timer = setTimeout(() => {
      socket.destroy()
      done()
    }, opts.waitMs)
    socket.on("data", (d) => (response += d.toString("latin1")))
    const sentAll = () => (!opts.stream && opts.trickle === undefined) || written >= (opts.bodyBytes ?? Infinity)
    socket.on("end", () => {
      ended = true
      if (sentAll()) socket.end()
    })
    socket.on("error", (e: NodeJS.ErrnoException) => (error ??= e.code))
    socket.on("close", () => {
      if (closed) return
      closed = true
      done()
    })
    const pump = () => {
      while (!socket.destroyed && socket.writable && written < (opts.bodyBytes ?? Infinity)) {
        const n = Math.min(chunk.length, (opts.bodyBytes ?? Infinity) - written)
        written += n
        if (!socket.write(n === chunk.length ? framed : chunk.subarray(0, n))) return socket.once("drain", pump)
      }
      if (ended && sentAll()) socket.end()
    }
    socket.on("connect", () => {
      socket.write(head)
      if (opts.tail !== undefined) socket.write(opts.tail)
      if (opts.stream) pump()
      if (opts.trickle !== undefined) {
        trickling = setInterval(() => {
          if (!socket.writable) return
          written += chunk.length
          socket.write(framed)
        }, opts.trickle)
      }
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

  it("401 before the body (no key, 1 GiB announced): JSON 401, Connection: close, the server cuts the connection once LINGER.bytes were drained", async () => {
    const r = await exchange(port(), head("/v1/chat/completions", { "content-length": String(2 ** 30) }), { stream: true, waitMs: 5000 })
    console.log(`[finding 4] 401: closed ${r.closed} after ${r.closedAfterMs.toFixed(0)} ms, ${(r.bodyBytesWritten / 1024).toFixed(0)} KiB of body written`)
    expect(statusOf(r.response)).toBe(401)
    expect(headerOf(r.response, "connection")).toBe("close")
    expect(errorOf(r.response)).toMatchObject({ code: "invalid_api_key" })
    expect(r.closed).toBe(true)
    // The drain's bound, plus what the two sockets' kernel buffers hold.
    expect(r.bodyBytesWritten).toBeLessThan(LINGER.bytes + 16 * 1024 * 1024)
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

describe("a refused body's answer reaches the client: a lingering close (issue 38, finding 6)", () => {
  // The default limits: an 8 MiB body, a 30 s request timeout (so the drain's own bounds are what ends it).
  const env = useMockedGateway({ beforeAll, afterAll })
  const port = () => Number(new URL(env.gateway.origin).port)
  const head = (path: string, headers: Record<string, string>) =>
    `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("")}\r\n`
  const MESSAGE = 40 * 1024 * 1024

  it("a declared 40 MB body, five times each — over the limit (413), without a key (401), a wrong admin token (401): the client writes all of it, reads the JSON answer with Connection: close, and the connection ends with a FIN, never a reset", async () => {
    const cases = [
      ["/v1/chat/completions", { authorization: `Bearer ${env.gateway.devKey}` }, 413],
      ["/v1/chat/completions", {}, 401],
      ["/admin/v1/projects", { authorization: "Bearer wrong" }, 401]
    ] as const
    for (const [path, headers, status] of cases) {
      const seen: Array<string> = []
      for (let i = 0; i < 5; i++) {
        const r = await exchange(port(), head(path, { ...headers, "content-length": String(MESSAGE) }), { stream: true, bodyBytes: MESSAGE, waitMs: 15_000 })
        seen.push(`${statusOf(r.response)}${r.error === undefined ? "" : ` ${r.error}`} ${r.closedAfterMs.toFixed(0)} ms`)
        expect(statusOf(r.response)).toBe(status)
        expect(headerOf(r.response, "connection")).toBe("close")
        expect(r.error).toBeUndefined()
        expect(r.bodyBytesWritten).toBe(MESSAGE)
        expect(r.ended).toBe(true)
        expect(r.closed).toBe(true)
      }
      console.log(`[issue 38, finding 6] ${path} ${status}, 40 MB raw: ${seen.join(", ")}`)
    }
  })

  /** Five tries of a 40 MB chat message from a process of its own (its own event loop, as a real client's): each try's status or error. */
  const fiveTries = (client: "sdk" | "http"): Promise<Array<string>> =>
    new Promise((resolve, reject) => {
      const script = `
        import OpenAI from "openai"
        import { request } from "node:http"
        const [base, key, client] = process.argv.slice(1)
        const messages = [{ role: "user", content: "x".repeat(${MESSAGE}) }]
        const body = Buffer.from(JSON.stringify({ model: "auto", messages }))
        const viaSdk = () => new OpenAI({ baseURL: base, apiKey: key, maxRetries: 0 }).chat.completions.create({ model: "auto", messages })
          .then(() => "200", (e) => e.status !== undefined ? String(e.status) : String(e.cause?.code ?? e.cause?.message ?? e.message))
        const viaHttp = () => new Promise((done) => {
          const req = request(base + "/chat/completions", { method: "POST", headers: { authorization: "Bearer " + key, "content-type": "application/json", "content-length": body.length } }, (res) => {
            res.resume()
            res.on("end", () => done(String(res.statusCode)))
            res.on("error", (e) => done(String(e.code)))
          })
          req.on("error", (e) => done(String(e.code)))
          req.end(body)
        })
        const out = []
        for (let i = 0; i < 5; i++) out.push(await (client === "sdk" ? viaSdk() : viaHttp()))
        console.log(JSON.stringify(out))
      `
      execFile(process.execPath, ["--input-type=module", "-e", script, env.gateway.url, env.gateway.devKey, client], { cwd: process.cwd(), timeout: 60_000 }, (error, stdout) =>
        error === null ? resolve(JSON.parse(stdout) as Array<string>) : reject(error)
      )
    })

  it("the official openai SDK (maxRetries: 0) with a 40 MB message, five times: five 413s", async () => {
    const outcomes = await fiveTries("sdk")
    console.log(`[issue 38, finding 6] openai SDK, 40 MB: ${outcomes.join(" ")}`)
    expect(outcomes).toEqual(["413", "413", "413", "413", "413"])
  })

  it("node's http client with a 40 MB message, five times: five 413s", async () => {
    const outcomes = await fiveTries("http")
    console.log(`[issue 38, finding 6] node http, 40 MB: ${outcomes.join(" ")}`)
    expect(outcomes).toEqual(["413", "413", "413", "413", "413"])
  })

  it("an endless body is cut off: a fast one once LINGER.bytes were drained, a slow one (1 KiB every 20 ms) after LINGER.ms", async () => {
    const endless = { "content-length": String(2 ** 40) }
    const [fast, slow401, slow413] = await Promise.all([
      exchange(port(), head("/v1/chat/completions", endless), { stream: true, waitMs: 15_000 }),
      exchange(port(), head("/v1/chat/completions", endless), { trickle: 20, waitMs: 15_000 }),
      exchange(port(), head("/v1/chat/completions", { ...endless, authorization: `Bearer ${env.gateway.devKey}` }), { trickle: 20, waitMs: 15_000 })
    ])
    console.log(
      `[issue 38, finding 6] endless body cut off: fast after ${fast.closedAfterMs.toFixed(0)} ms (${(fast.bodyBytesWritten / 2 ** 20).toFixed(0)} MiB written), ` +
        `slow after ${slow401.closedAfterMs.toFixed(0)} ms (401) and ${slow413.closedAfterMs.toFixed(0)} ms (413); bounds ${LINGER.ms} ms, ${LINGER.bytes / 2 ** 20} MiB`
    )
    expect(statusOf(fast.response)).toBe(401)
    expect(fast.closed).toBe(true)
    expect(fast.bodyBytesWritten).toBeGreaterThan(LINGER.bytes)
    expect(fast.bodyBytesWritten).toBeLessThan(LINGER.bytes + 16 * 1024 * 1024)
    expect(fast.closedAfterMs).toBeLessThan(LINGER.ms)
    for (const [slow, status] of [[slow401, 401], [slow413, 413]] as const) {
      expect(statusOf(slow.response)).toBe(status)
      expect(slow.closed).toBe(true)
      expect(slow.closedAfterMs).toBeGreaterThanOrEqual(LINGER.ms * 0.95)
      expect(slow.closedAfterMs).toBeLessThan(LINGER.ms + 1500)
    }
  })
})
