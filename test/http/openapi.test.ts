import { Schema } from "effect"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as S from "../../src/http/schemas.ts"
import { useMockedGateway } from "../support/gateway.ts"

describe("OpenAPI document and the wire schemas", () => {
  const env = useMockedGateway({ beforeAll, afterAll })
  const get = async (path: string) => {
    const res = await fetch(`${env.gateway.url}${path}`, { headers: { authorization: `Bearer ${env.gateway.devKey}` } })
    return { status: res.status, body: (await res.json()) as unknown }
  }

  it("/openapi.json is OpenAPI 3.1 and documents every public path with its error codes", async () => {
    const doc: any = await (await fetch(`${env.gateway.origin}/openapi.json`)).json()
    expect(doc.openapi).toBe("3.1.0")
    expect(Object.keys(doc.paths).sort()).toEqual(
      [
        "/healthz", "/v1/chat/completions", "/v1/models", "/v1/rate_cards", "/v1/receipts/keys", "/v1/requests/{id}", "/v1/requests/{id}/receipt", "/v1/responses", "/v1/routing/evaluate", "/v1/usage",
        "/admin/v1/session", "/admin/v1/projects", "/admin/v1/projects/{id}", "/admin/v1/projects/{id}/keys", "/admin/v1/keys/{id}/rotate", "/admin/v1/keys/{id}/revoke",
        "/admin/v1/projects/{id}/usage", "/admin/v1/projects/{id}/requests", "/admin/v1/projects/{id}/requests/{request_id}", "/admin/v1/projects/{id}/requests/{request_id}/receipt",
        "/admin/v1/webhooks", "/admin/v1/webhooks/{id}", "/admin/v1/webhooks/{id}/rotate_secret", "/admin/v1/webhooks/{id}/deliveries", "/admin/v1/webhooks/{id}/deliveries/{delivery_id}/retry", "/admin/v1/events",
        "/v1/receipts", "/v1/receipts/checkpoint", "/v1/receipts/consistency", "/v1/requests/{id}/receipt/proof", "/v1/statements/{period}", "/admin/v1/projects/{id}/receipts", "/admin/v1/projects/{id}/statements/{period}",
        "/admin/v1/keys/{id}", "/admin/v1/keys/{id}/budget", "/admin/v1/projects/{id}/end_user_budget", "/admin/v1/projects/{id}/end_users", "/admin/v1/projects/{id}/end_users/{user}",
        "/admin/v1/projects/{id}/key_budgets"
      ].sort()
    )
    const chat = doc.paths["/v1/chat/completions"].post
    expect(Object.keys(chat.responses).sort()).toEqual(["200", "400", "401", "402", "409", "413", "422", "429", "503"])
    expect(chat.security).toEqual([{ bearer: [] }])
    expect(doc.components.schemas.Governance.required.sort()).toEqual(
      ["credits_charged", "rate_card_version", "receipt_id", "request_id", "status", "verification"].sort()
    )
  })

  it("every admin list documents the same paging: limit and cursor in, has_more and next_cursor out", async () => {
    const doc: any = await (await fetch(`${env.gateway.origin}/openapi.json`)).json()
    const resolve = (schema: any) => (schema.$ref === undefined ? schema : doc.components.schemas[schema.$ref.split("/").at(-1)])
    for (const path of ["/admin/v1/projects", "/admin/v1/projects/{id}/keys", "/admin/v1/projects/{id}/requests", "/admin/v1/projects/{id}/end_users", "/admin/v1/projects/{id}/key_budgets"]) {
      const list = doc.paths[path].get
      expect([path, list.parameters.filter((p: any) => p.in === "query" && (p.name === "limit" || p.name === "cursor")).length]).toEqual([path, 2])
      expect(list.responses["400"]).toBeDefined()
      const page = resolve(list.responses["200"].content["application/json"].schema)
      expect([path, ...["object", "data", "has_more", "next_cursor"].map((f) => page.required.includes(f))]).toEqual([path, true, true, true, true])
    }
  })

  it("real responses decode with the schemas the document is generated from", async () => {
    const client = new OpenAI({ baseURL: env.gateway.url, apiKey: env.gateway.devKey, maxRetries: 0 })
    const completion = await client.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "schema check" }] })
    const decode = <A, I>(schema: Schema.Schema<A, I>, value: unknown) => Schema.decodeUnknownSync(schema)(value)
    const governance = decode(S.ChatCompletion, completion).governance
    decode(S.RequestStatus, (await get(`/requests/${governance.request_id}`)).body)
    decode(S.Receipt, (await get(`/requests/${governance.request_id}/receipt`)).body)
    decode(S.Usage, (await get(`/usage`)).body)
    decode(S.ModelList, (await get(`/models`)).body)
    decode(S.ReceiptKeys, (await get(`/receipts/keys`)).body)
    const cards = decode(S.RateCards, (await get(`/rate_cards`)).body)
    expect(cards.data.map((c) => c.version)).toEqual(["rc_2020-01"])
    expect(cards.data[0]!.prices["gpt-test"]).toEqual({ input: 1000, output: 2000 })
    const response = await client.responses.create({ model: "auto", input: "schema check" })
    decode(S.ResponseObject, response)
    const evaluation = await fetch(`${env.gateway.url}/routing/evaluate`, {
      method: "POST",
      headers: { authorization: `Bearer ${env.gateway.devKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "auto", messages: [{ role: "user", content: "x" }] })
    })
    decode(S.Evaluation, await evaluation.json())
    const missing = await get(`/requests/req_doesnotexist`)
    expect(missing.status).toBe(404)
    expect(decode(S.ErrorBody, missing.body).error.code).toBe("request_not_found")
  })

  it("a schema that does not match what the server sends fails to decode (the check can fail)", async () => {
    const status = (await get(`/usage`)).body
    const Wrong = Schema.Struct({ ...S.Usage.fields, credits: Schema.String })
    expect(() => Schema.decodeUnknownSync(Wrong)(status)).toThrow()
  })

  it("/docs is the platform's Scalar page of the same document, its script inline (no src from any origin)", async () => {
    const res = await fetch(`${env.gateway.origin}/docs`)
    expect(res.headers.get("content-type")).toMatch(/text\/html/)
    const html = await res.text()
    const embedded = /<script id="api-reference" type="application\/json">([\s\S]*?)<\/script>/.exec(html)?.[1]
    expect(JSON.parse(embedded!)).toEqual(await (await fetch(`${env.gateway.origin}/openapi.json`)).json())
    // (Scalar's own script names CDNs in its code; what matters is that no tag loads one.)
    expect(/<(script|link)[^>]*\s(src|href)=/.test(html), "a tag loads a resource").toBe(false)
  })
})
