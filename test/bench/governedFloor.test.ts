/**
 * The governed floor (bench/targets/governedFloor.ts) is the bench's yardstick for what the guarantees
 * cost without Tollgate's pipeline, so it must keep them, streamed or not: each call answered through
 * the official client with its governance, a signed receipt per call, and a store that audits clean.
 * Run as the bench runs it (its own process, from the sources) against the real-HTTP mock upstream.
 */
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Child, startChild } from "../../bench/lib/procs.ts"
import { auditStore } from "../../src/store/auditReader.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"

interface Ready {
  readonly port: number
  readonly key: string
  readonly dbPath: string
}

interface Governed {
  readonly governance?: { readonly status: string; readonly receipt_id: string; readonly credits_charged: number }
}

let mock: MockUpstream
let floor: Child<Ready>
let client: OpenAI

beforeAll(async () => {
  mock = await startMockUpstream({ port: 0, record: false })
  floor = await startChild<Ready>(
    "floor",
    process.execPath,
    ["--import", "tsx", "bench/targets/governedFloor.ts", "--upstream", mock.url.replace(/\/v1\/?$/, ""), "--model", "gpt-4o-mini"],
    { timeoutMs: 60_000 }
  )
  client = new OpenAI({ baseURL: `http://127.0.0.1:${floor.ready.port}/v1`, apiKey: floor.ready.key, maxRetries: 0 })
}, 90_000)

afterAll(async () => {
  await floor?.stop()
  await mock?.close()
})

const messages = [{ role: "user" as const, content: "Where is my order?" }]

describe("the governed floor keeps the guarantees it is measured with", () => {
  it("settles a streamed and a plain call, each with a receipt, and its store audits clean", async () => {
    const stream = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages,
      stream: true,
      stream_options: { include_usage: true },
      metadata: { idempotency_key: "floor-stream-1" }
    })
    const chunks: Array<Governed & { readonly choices: ReadonlyArray<{ readonly delta?: { readonly content?: string | null } }> }> = []
    for await (const chunk of stream) chunks.push(chunk as unknown as (typeof chunks)[number])
    const text = chunks.map((c) => c.choices.map((x) => x.delta?.content ?? "").join("")).join("")
    expect(text.length).toBeGreaterThan(0)
    // Governance rides on the last event only, after the charge settled.
    expect(chunks.slice(0, -1).every((c) => c.governance === undefined)).toBe(true)
    const streamed = chunks.at(-1)!.governance!
    expect(streamed.status).toBe("completed")
    expect(streamed.credits_charged).toBeGreaterThan(0)

    const plain = (await client.chat.completions.create({ model: "gpt-4o-mini", messages, metadata: { idempotency_key: "floor-plain-1" } })) as unknown as Governed
    expect(plain.governance?.status).toBe("completed")
    expect(plain.governance?.receipt_id).not.toBe(streamed.receipt_id)

    const audit = await auditStore({ database: `sqlite:${floor.ready.dbPath}`, jobs: 0 })
    expect({ clean: audit.summary.clean, receipts: audit.summary.stats.receipts }).toEqual({ clean: true, receipts: 2 })
  }, 60_000)
})
