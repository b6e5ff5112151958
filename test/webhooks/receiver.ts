/**
 * A webhook receiver on loopback for the tests (issue 42): every delivery is verified with the
 * `standardwebhooks` package against the endpoint's secret (as any Standard Webhooks receiver would),
 * and recorded with its headers and body. `answer` says what to reply (200 unless told otherwise).
 */
import { createServer, type IncomingMessage, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { Webhook } from "standardwebhooks"

export interface Received {
  readonly headers: Record<string, string>
  readonly body: string
  readonly event: { id: string; type: string; created_at: string; data: any }
  /** The verification's verdict: true, or the reason it failed. */
  readonly verified: true | string
  /** What the receiver answered. */
  readonly status: number
}

export interface Receiver {
  readonly url: string
  readonly received: Array<Received>
  /** The secrets a delivery may be signed with (the endpoint's, shown once at creation or rotation). */
  secrets: Array<string>
  /** What to answer (a promise: answered when it resolves, a slow receiver). */
  answer: (r: Omit<Received, "status">) => number | Promise<number>
  /** The events answered 2xx, by id: how many times each. */
  readonly acknowledged: () => Map<string, number>
  readonly close: () => Promise<void>
}

const readBody = (req: IncomingMessage): Promise<string> =>
  new Promise((resolve, reject) => {
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")))
    req.on("error", reject)
  })

export const startReceiver = async (path = "/hook"): Promise<Receiver> => {
  const received: Array<Received> = []
  const receiver: Receiver = {
    url: "",
    received,
    secrets: [],
    answer: () => 200,
    acknowledged: () => {
      const m = new Map<string, number>()
      for (const r of received) if (r.status >= 200 && r.status < 300) m.set(r.event.id, (m.get(r.event.id) ?? 0) + 1)
      return m
    },
    close: () => new Promise((resolve) => server.close(() => resolve()))
  }
  const server: Server = createServer(async (req, res) => {
    const body = await readBody(req)
    const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)]))
    let verified: true | string = "no secret matched"
    for (const secret of receiver.secrets) {
      try {
        new Webhook(secret).verify(body, headers)
        verified = true
        break
      } catch (e) {
        verified = String(e)
      }
    }
    const event = JSON.parse(body)
    const r: Omit<Received, "status"> = { headers, body, event, verified }
    const status = verified === true ? await receiver.answer(r) : 400
    received.push({ ...r, status })
    res.writeHead(status, { "content-type": "text/plain" })
    res.end(status < 300 ? "ok" : "no")
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  ;(receiver as { url: string }).url = `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`
  return receiver
}

/** Wait until `check` holds (polling), or fail after `ms` with `what`. Not a timing assertion: a bound on a wait. */
export const eventually = async (what: string, check: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> => {
  const until = Date.now() + ms
  while (Date.now() < until) {
    if (await check()) return
    await new Promise((r) => setTimeout(r, 25))
  }
  throw new Error(`timed out waiting for: ${what}`)
}
