/**
 * OpenTelemetry traces of the governed call (issue 19, operations): with an OTLP endpoint configured
 * the gateway exports, over OTLP/HTTP JSON, one `tollgate.governed_call` span per call with its
 * reservation, upstream call and settlement as children of one trace, carrying ids and never a key.
 * The collector here is a real HTTP server on loopback that keeps what it receives.
 */
import { Option } from "effect"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"

interface OtlpSpan {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId?: string
  readonly name: string
  readonly attributes: ReadonlyArray<{ readonly key: string; readonly value: { readonly stringValue?: string; readonly intValue?: string | number } }>
}

describe("OpenTelemetry traces when OTEL_EXPORTER_OTLP_ENDPOINT is set", () => {
  const received: Array<string> = []
  let collector: Server
  let upstream: MockUpstream
  let gw: TestGateway | undefined

  beforeAll(async () => {
    collector = createServer((req, res) => {
      let body = ""
      req.setEncoding("utf8")
      req.on("data", (c: string) => (body += c))
      req.on("end", () => {
        if (req.url === "/v1/traces") received.push(body)
        res.writeHead(200, { "content-type": "application/json" }).end("{}")
      })
    })
    await new Promise<void>((resolve) => collector.listen(0, "127.0.0.1", resolve))
    upstream = await startMockUpstream()
  })
  afterAll(async () => {
    await gw?.close()
    await upstream.close()
    await new Promise((resolve) => collector.close(resolve))
  })

  it("exports the call's reserve, upstream and settle spans under one governed_call span, with its request id and no secret", async () => {
    const port = (collector.address() as AddressInfo).port
    gw = await startGateway(mockGatewayFile(upstream.url), { otlpTracesUrl: Option.some(`http://127.0.0.1:${port}/v1/traces`) })
    const client = new OpenAI({ baseURL: gw.url, apiKey: gw.devKey, maxRetries: 0 })
    const completion = (await client.chat.completions.create({
      model: "auto",
      messages: [{ role: "user", content: "trace me" }],
      metadata: { idempotency_key: "traced-1" }
    })) as OpenAI.ChatCompletion & { governance: { request_id: string; credits_charged: number } }
    // Closing the gateway flushes the exporter's batch.
    await gw.close()
    gw = undefined

    const spans: Array<OtlpSpan> = received.flatMap((body) =>
      (JSON.parse(body) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<OtlpSpan> }> }> }).resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans))
    )
    const attr = (span: OtlpSpan, key: string) => span.attributes.find((a) => a.key === key)?.value
    const root = spans.find((s) => s.name === "tollgate.governed_call")
    expect(root, `spans received: ${spans.map((s) => s.name).join(", ")}`).toBeDefined()
    const children = spans.filter((s) => s.traceId === root!.traceId && s.parentSpanId === root!.spanId).map((s) => s.name)
    expect(children).toEqual(expect.arrayContaining(["tollgate.reserve", "tollgate.upstream", "tollgate.settle"]))
    const settle = spans.find((s) => s.name === "tollgate.settle" && s.traceId === root!.traceId)!
    expect(attr(settle, "tollgate.request_id")?.stringValue).toBe(completion.governance.request_id)
    expect(Number(attr(settle, "tollgate.credits_charged")?.intValue)).toBe(completion.governance.credits_charged)
    for (const body of received) {
      expect(body).not.toContain("tg_dev_")
      expect(body).not.toContain("trace me")
    }
  }, 30_000)
})
