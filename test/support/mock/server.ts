/**
 * The mock upstream's server and lifecycle: routing, request recording, behaviour selection (one-shot
 * queue, per model, default), listen and close. The providers' wire shapes are in openai.ts and
 * anthropic.ts, the faults in faults.ts.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { anthropicErrorFor, messages } from "./anthropic.ts"
import { leftByClient } from "./faults.ts"
import { chatCompletions, openAIErrorFor } from "./openai.ts"
import { isObject } from "./replies.ts"
import type { MockBehavior, MockUpstream, RecordedRequest, StartMockUpstreamOptions } from "./types.ts"
import { readBody, sendJson } from "./wire.ts"

const MAX_RECORDED = 1000
const DEFAULT_MODEL = "mock-model"

class MockUpstreamImpl implements MockUpstream {
  url = ""
  port = 0
  calls = 0
  abandoned = 0
  connections = 0
  requests: RecordedRequest[] = []
  behaviorsByModel = new Map<string, MockBehavior>()
  private defaultBehavior: MockBehavior
  private queue: MockBehavior[] = []
  private readonly record: boolean
  private requestSeq = 0
  readonly server: Server

  constructor(opts: StartMockUpstreamOptions) {
    this.defaultBehavior = opts.behavior ?? {}
    this.record = opts.record ?? true
    this.server = createServer({ keepAlive: true }, (req, res) => {
      res.once("close", () => {
        if (leftByClient(res)) this.abandoned++
      })
      this.handle(req, res).catch((err: unknown) => {
        if (!res.headersSent && !res.destroyed) {
          sendJson(res, 500, openAIErrorFor(500, `mock upstream internal error: ${String(err)}`), "req_mock_err")
        } else {
          res.destroy()
        }
      })
    })
    this.server.on("connection", () => this.connections++)
    this.server.keepAliveTimeout = 65_000
    this.server.headersTimeout = 66_000
    this.server.requestTimeout = 0
  }

  setBehavior(b: MockBehavior): void {
    this.defaultBehavior = b
  }

  pushBehavior(b: MockBehavior): void {
    this.queue.push(b)
  }

  reset(): void {
    this.calls = 0
    this.abandoned = 0
    this.connections = 0
    this.requests.length = 0
    this.queue.length = 0
    this.behaviorsByModel.clear()
    this.defaultBehavior = {}
  }

  close(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.close((err) => (err ? reject(err) : resolve()))
      this.server.closeAllConnections()
    })
  }

  private nextBehavior(model: string | undefined): MockBehavior {
    const queued = this.queue.shift()
    if (queued !== undefined) return queued
    if (model !== undefined) {
      const byModel = this.behaviorsByModel.get(model)
      if (byModel !== undefined) return byModel
    }
    return this.defaultBehavior
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? "GET"
    const rawUrl = req.url ?? "/"
    const q = rawUrl.indexOf("?")
    let path = q === -1 ? rawUrl : rawUrl.slice(0, q)
    if (path.length > 1 && path.endsWith("/")) path = path.slice(0, -1)
    const raw = await readBody(req)
    const requestId = `req_mock_${(++this.requestSeq).toString(36)}`

    let body: unknown = undefined
    let parseError = false
    if (raw.length > 0) {
      try {
        body = JSON.parse(raw)
      } catch {
        body = raw
        parseError = true
      }
    }
    if (this.record) {
      this.requests.push({ method, path, headers: { ...req.headers }, body })
      if (this.requests.length > MAX_RECORDED) this.requests.splice(0, this.requests.length - MAX_RECORDED)
    }

    const isChat = method === "POST" && path === "/v1/chat/completions"
    const isMessages = method === "POST" && path === "/v1/messages"

    if (isChat || isMessages) {
      this.calls++
      const errorShape = isMessages ? anthropicErrorFor : openAIErrorFor
      if (parseError || !isObject(body)) {
        const msg = parseError ? "We could not parse the JSON body of your request." : "Request body must be a JSON object."
        sendJson(res, 400, errorShape(400, msg), requestId)
        return
      }
      const list = body["messages"]
      if (!Array.isArray(list)) {
        sendJson(res, 400, errorShape(400, "'messages' is a required property"), requestId)
        return
      }
      const model = typeof body["model"] === "string" ? body["model"] : undefined
      const request = { body, messages: list, model: model ?? DEFAULT_MODEL, behavior: this.nextBehavior(model), requestId }
      await (isChat ? chatCompletions(res, request) : messages(res, request))
      return
    }

    if (method === "GET" && path === "/v1/models") {
      const created = 1_700_000_000
      const ids = new Set<string>([DEFAULT_MODEL, ...this.behaviorsByModel.keys()])
      sendJson(res, 200, { object: "list", data: [...ids].map((id) => ({ id, object: "model", created, owned_by: "mock-upstream" })) }, requestId)
      return
    }

    sendJson(res, 404, openAIErrorFor(404, `Unknown request URL: ${method} ${path}.`), requestId)
  }
}

export function startMockUpstream(opts: StartMockUpstreamOptions = {}): Promise<MockUpstream> {
  const mock = new MockUpstreamImpl(opts)
  const host = opts.host ?? "127.0.0.1"
  return new Promise((resolve, reject) => {
    const onError = (err: Error): void => reject(err)
    mock.server.once("error", onError)
    mock.server.listen(opts.port ?? 0, host, () => {
      mock.server.off("error", onError)
      const addr = mock.server.address() as AddressInfo
      mock.port = addr.port
      const urlHost = host.includes(":") ? `[${host}]` : host === "0.0.0.0" ? "127.0.0.1" : host
      mock.url = `http://${urlHost}:${addr.port}/v1`
      resolve(mock)
    })
  })
}
