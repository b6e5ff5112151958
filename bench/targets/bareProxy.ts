/**
 * Bench child: the physical limit for a Node proxy. node:http in, undici Pool out, bodies piped
 * through untouched (no parsing, no governance). Every gateway pays at least this much.
 * Prints one JSON line `{"ready":true,"port":N}` when listening (with `"log":PATH`, the row file, when durable).
 *
 * `--durable` (target `bare-durable`) adds only what "no lost charge" costs at the least: one row
 * committed with SQLite's `synchronous=FULL` (WAL, one fsync, on the event loop) before the client
 * sees the answer. A non-streamed answer is held until its row is on disk; a stream's row is
 * committed while its upstream request is out (durable before the headers are passed on, as
 * Tollgate's stream reservation is), and a second one before its last byte. No governance, no
 * signature, no hand-off: the distance from `bare` is the disk's price alone.
 */
import BetterSqlite3 from "better-sqlite3"
import { mkdtempSync } from "node:fs"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Pool } from "undici"
import { arg, flag } from "../lib/args.ts"

const upstream = new URL(arg("--upstream") ?? "http://127.0.0.1:9100")
const pool = new Pool(upstream.origin, { connections: 512, pipelining: 1, keepAliveTimeout: 60_000 })

/** Hop-by-hop headers are not forwarded (RFC 9110 §7.6.1). */
const HOP = new Set(["connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection", "te", "trailer", "host"])

/**
 * `--durable`: `commit(bytes, then, failed)` writes one small row and calls `then` once it is on disk
 * (`failed` if it is not). The rows asked for in one event-loop turn share one transaction, one fsync:
 * Tollgate's own group commit (src/store/syncTransactions.ts), loaded only here, so the plain bare
 * proxy stays free of it.
 */
const durable = flag("--durable") ? await durableLog() : undefined
const commit = durable?.commit

async function durableLog(): Promise<{
  readonly path: string
  readonly commit: (bytes: number, then: () => void, failed: () => void) => void
}> {
  const { makeGroupCommit } = await import("../../src/store/syncTransactions.ts")
  const path = join(mkdtempSync(join(tmpdir(), "tollgate-bare-")), "log.db")
  const db = new BetterSqlite3(path)
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = FULL")
  db.exec("CREATE TABLE IF NOT EXISTS charge (id INTEGER PRIMARY KEY, at INTEGER NOT NULL, bytes INTEGER NOT NULL)")
  const insert = db.prepare("INSERT INTO charge (at, bytes) VALUES (?, ?)")
  const group = makeGroupCommit(db)
  return {
    path,
    commit: (bytes, then, failed) =>
      group.submit(
        () => insert.run(Date.now(), bytes),
        (outcome) => (outcome._tag === "Committed" ? then() : failed())
      )
  }
}

/** Passes the upstream's answer on; with `--durable`, committing first as the module comment says. */
const relay = (res: ServerResponse, statusCode: number, out: Record<string, string | string[]>, body: NodeJS.ReadableStream, streamed: boolean) => {
  body.on("error", () => res.destroy())
  if (commit === undefined) {
    res.writeHead(statusCode, out)
    body.pipe(res)
    return
  }
  const chunks: Array<Buffer> = []
  let bytes = 0
  if (streamed) res.writeHead(statusCode, out)
  body.on("data", (chunk: Buffer) => {
    bytes += chunk.length
    if (streamed) res.write(chunk)
    else chunks.push(chunk)
  })
  body.on("end", () =>
    commit(
      bytes,
      () => {
        if (!streamed) res.writeHead(statusCode, out)
        res.end(streamed ? undefined : Buffer.concat(chunks))
      },
      () => res.destroy()
    )
  )
}

const server = createServer({ keepAlive: true }, (req, res) => {
  const headers: Record<string, string> = {}
  for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string" && !HOP.has(k)) headers[k] = v
  if (commit === undefined) return forward(req, res, headers, req, false)
  // Durable: the body is read whole, to know a stream before its request leaves.
  const parts: Array<Buffer> = []
  req.on("data", (chunk: Buffer) => parts.push(chunk))
  req.on("end", () => {
    const body = Buffer.concat(parts)
    forward(req, res, headers, body, /"stream"\s*:\s*true/.test(body.toString("latin1")))
  })
})

const forward = (req: IncomingMessage, res: ServerResponse, headers: Record<string, string>, body: IncomingMessage | Buffer, stream: boolean) => {
  const answer = pool.request({ method: req.method as "POST", path: req.url ?? "/", headers, body })
  // A stream's first row goes to disk while its request is out, before its headers are passed on.
  const opened =
    stream && commit !== undefined
      ? new Promise<void>((committed, failed) => commit(0, committed, () => failed(new Error("the row was not committed")))).then(() => answer)
      : answer
  answer.catch(() => undefined) // answered through `opened`; not unhandled while the commit waits
  opened
    .then(
      (up) => {
        const out: Record<string, string | string[]> = {}
        for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !HOP.has(k)) out[k] = v
        relay(res, up.statusCode, out, up.body, String(up.headers["content-type"] ?? "").startsWith("text/event-stream"))
      },
      (err: Error) => {
        if (res.headersSent) return res.destroy()
        res.writeHead(502, { "content-type": "application/json" })
        res.end(JSON.stringify({ error: { message: `bare proxy: ${err.message}`, type: "proxy_error", code: "bad_gateway", param: null } }))
      }
    )
}
server.keepAliveTimeout = 60_000
server.headersTimeout = 61_000
server.listen(Number(arg("--port") ?? "0"), "127.0.0.1", () => {
  const port = (server.address() as AddressInfo).port
  process.stdout.write(JSON.stringify(durable === undefined ? { ready: true, port } : { ready: true, port, log: durable.path }) + "\n")
})
const stop = () => {
  server.close(() => void pool.close().finally(() => process.exit(0)))
  server.closeAllConnections()
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
