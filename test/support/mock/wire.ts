/** The mock upstream's HTTP plumbing: reading bodies, writing JSON. */
import type { IncomingMessage, ServerResponse } from "node:http"

/** Waits `ms`; 0 yields to the event loop once (setTimeout would clamp it to 1 ms). */
export const sleep = (ms: number): Promise<void> => new Promise((resolve) => (ms > 0 ? setTimeout(resolve, ms) : setImmediate(resolve)))

/** True once the client connection is gone (or the mock destroyed it). */
export const gone = (res: ServerResponse): boolean => res.destroyed || res.socket === null || res.socket.destroyed

export const sendJson = (res: ServerResponse, status: number, body: unknown, requestId: string): void => {
  const payload = JSON.stringify(body)
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(payload),
    "x-request-id": requestId
  })
  res.end(payload)
}

export const readBody = (req: IncomingMessage): Promise<string> =>
  new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => resolve(chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks).toString("utf8")))
    req.on("error", reject)
  })
