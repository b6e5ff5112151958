/**
 * The routes HttpApiBuilder serves (src/http/apiRoutes.ts), through the running server: the project-key
 * middleware answers like the governed calls (401 with the domain's message and headers), a query the
 * schema refuses is an OpenAI-shaped 400 naming the parameter, and a domain failure keeps its wire form.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { useMockedGateway } from "../support/gateway.ts"

describe("the HttpApi's routes on the wire", () => {
  const env = useMockedGateway({ beforeAll, afterAll })
  const get = async (path: string, key: string | null = env.gateway.devKey) => {
    const res = await fetch(`${env.gateway.origin}${path}`, { headers: key === null ? {} : { authorization: `Bearer ${key}` } })
    return { status: res.status, headers: res.headers, body: (await res.json()) as { error?: { message: string; type: string; code: string | null; param: string | null } } }
  }

  it("no key and a malformed key get the same 401s as the governed calls", async () => {
    for (const key of [null, "sk-nope"]) {
      const [models, chat] = [await get("/v1/models", key), await fetch(`${env.gateway.origin}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", ...(key === null ? {} : { authorization: `Bearer ${key}` }) },
        body: "{}"
      })]
      expect(models.status).toBe(401)
      expect(models.body).toEqual(await chat.json())
      expect(models.headers.get("x-should-retry")).toBe("false")
    }
  })

  it("a query the schema refuses is a 400 invalid_request_error naming it, not the platform's body", async () => {
    const res = await get("/v1/usage?period=2026-01&period=2026-02")
    expect(res.status).toBe(400)
    expect(res.body.error).toMatchObject({ type: "invalid_request_error", param: "period" })
    expect(JSON.stringify(res.body)).not.toContain("HttpApiDecodeError")
  })

  it("a domain failure keeps its wire form: a bad period, an unknown request", async () => {
    const usage = await get("/v1/usage?period=2026-13")
    expect([usage.status, usage.body.error]).toEqual([400, { message: "period must be a window of the project's month budget period, written YYYY-MM.", type: "invalid_request_error", code: "invalid_request_error", param: "period" }])
    const missing = await get("/v1/requests/req_nope")
    expect(missing.status).toBe(404)
    expect(missing.body.error?.code).toBe("request_not_found")
  })
})
