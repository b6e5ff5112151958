/**
 * Bench child: the physical limit for a Node proxy. node:http in, undici Pool out, bodies piped
 * through untouched (no parsing, no governance). Every gateway pays at least this much.
 * Prints one JSON line `{"ready":true,"port":N}` when listening.
 */
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { Pool } from "undici"
import { arg } from "../lib/args.ts"

const upstream = new URL(arg("--upstream") ?? "http://127.0.0.1:9100")
const pool = new Pool(upstream.origin, { connections: 512, pipelining: 1, keepAliveTimeout: 60_000 })

/** Hop-by-hop headers are not forwarded (RFC 9110 §7.6.1). */
const HOP = new Set(["connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection", "te", "trailer", "host"])

const server = createServer({ keepAlive: true }, (req, res) => {
  const headers: Record<string, string> = {}
  for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string" && !HOP.has(k)) headers[k] = v
  pool
    .request({ method: req.method as "POST", path: req.url ?? "/", headers, body: req })
    .then(
      (up) => {
        const out: Record<string, string | string[]> = {}
        for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !HOP.has(k)) out[k] = v
        res.writeHead(up.statusCode, out)
        up.body.pipe(res)
        up.body.on("error", () => res.destroy())
      },
      (err: Error) => {
        if (res.headersSent) return res.destroy()
        res.writeHead(502, { "content-type": "application/json" })
        res.end(JSON.stringify({ error: { message: `bare proxy: ${err.message}`, type: "proxy_error", code: "bad_gateway", param: null } }))
      }
    )
})
server.keepAliveTimeout = 60_000
server.headersTimeout = 61_000
server.listen(Number(arg("--port") ?? "0"), "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ ready: true, port: (server.address() as AddressInfo).port }) + "\n")
})
const stop = () => {
  server.close(() => void pool.close().finally(() => process.exit(0)))
  server.closeAllConnections()
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
