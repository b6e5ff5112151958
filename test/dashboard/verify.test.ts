/**
 * The dashboard's in-browser receipt check (dashboard/src/verify.ts) against real receipts: it runs
 * the package @tollgate/spec's browser build (pure JavaScript, @noble underneath; resolved as the
 * dashboard's Vite build resolves it), so it needs no secure context: valid receipts pass, and a
 * changed field or a foreign signature fails.
 */
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { useMockedGateway } from "../support/gateway.ts"

// A browser module (DOM types, its own tsconfig): loaded by path so the server's typecheck skips it.
const VERIFY = "../../dashboard/src/verify.ts"

describe("dashboard receipt verification", () => {
  const env = useMockedGateway({ beforeAll, afterAll })
  const secure = Object.getOwnPropertyDescriptor(globalThis, "isSecureContext")
  afterAll(() => {
    if (secure === undefined) delete (globalThis as any).isSecureContext
    else Object.defineProperty(globalThis, "isSecureContext", secure)
  })

  const receipts = async () => {
    const ai = new OpenAI({ baseURL: env.gateway.url, apiKey: env.gateway.devKey, maxRetries: 0 })
    const get = async (path: string): Promise<any> => (await fetch(`${env.gateway.url}${path}`, { headers: { authorization: `Bearer ${env.gateway.devKey}` } })).json()
    const ids = []
    for (const content of ["one", "two"]) ids.push(((await ai.chat.completions.create({ model: "auto", messages: [{ role: "user", content }] })) as any).governance.request_id)
    return { a: await get(`/requests/${ids[0]}/receipt`), b: await get(`/requests/${ids[1]}/receipt`), keys: (await get("/receipts/keys")).data }
  }

  for (const secureContext of [true, false]) {
    it(`${secureContext ? "a secure" : "an insecure"} context: a real receipt verifies; a changed field or another receipt's signature does not`, async () => {
      ;(globalThis as any).isSecureContext = secureContext
      const { verifyReceipt } = await import(VERIFY as string)
      const { a, b, keys } = await receipts()
      expect(await verifyReceipt(a, keys)).toEqual({ hash: true, signature: true, keyFound: true, engine: "@tollgate/spec" })
      expect(await verifyReceipt({ ...a, credits_charged: a.credits_charged + 1 }, keys)).toMatchObject({ hash: false, signature: false })
      expect(await verifyReceipt({ ...a, signature: b.signature }, keys)).toMatchObject({ hash: true, signature: false })
      expect(await verifyReceipt({ ...a, signing_key_id: "rk_unknown" }, keys)).toMatchObject({ signature: false, keyFound: false })
    })
  }
})
