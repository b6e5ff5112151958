/**
 * The durable bare proxy (bench/targets/bareProxy.ts --durable) is the bench's measure of the disk's
 * price (docs/decisions/0040), so it must do what it is said to do: a call's row committed before its
 * answer is passed on, and a stream's first row before its first event, its second before its end.
 * Run as the bench runs it (its own process, from the sources) against the real-HTTP mock upstream;
 * its row file read by a second connection at the moment the client has each answer.
 */
import BetterSqlite3 from "better-sqlite3"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type Child, startChild } from "../../bench/lib/procs.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"

interface Ready {
  readonly port: number
  readonly log: string
}

let mock: MockUpstream
let proxy: Child<Ready>
let client: OpenAI

beforeAll(async () => {
  // Events 20 ms apart, so the client holds the first one well before the last is sent.
  mock = await startMockUpstream({ port: 0, record: false, behavior: { chunkDelayMs: 20 } })
  proxy = await startChild<Ready>(
    "bare-durable",
    process.execPath,
    ["--import", "tsx", "bench/targets/bareProxy.ts", "--durable", "--upstream", mock.url.replace(/\/v1\/?$/, "")],
    { timeoutMs: 60_000 }
  )
  client = new OpenAI({ baseURL: `http://127.0.0.1:${proxy.ready.port}/v1`, apiKey: "sk-bench", maxRetries: 0 })
}, 90_000)

afterAll(async () => {
  await proxy?.stop()
  await mock?.close()
})

/** The rows committed so far, as another connection sees them now. */
const rows = (): ReadonlyArray<{ readonly bytes: number }> => {
  const db = new BetterSqlite3(proxy.ready.log, { readonly: true })
  try {
    return db.prepare("SELECT bytes FROM charge ORDER BY id").all() as Array<{ bytes: number }>
  } finally {
    db.close()
  }
}

const messages = [{ role: "user" as const, content: "Where is my order?" }]

describe("the durable bare proxy commits before it answers", () => {
  it("a plain call's row is committed when the client has the answer; a stream's first row when it has the first event, its second at the end", async () => {
    const before = rows().length
    const answer = await client.chat.completions.create({ model: "gpt-4o-mini", messages })
    expect(answer.choices[0]?.message.content?.length).toBeGreaterThan(0)
    const afterPlain = rows()
    expect(afterPlain.length).toBe(before + 1)
    expect(afterPlain.at(-1)!.bytes).toBeGreaterThan(0)

    const stream = await client.chat.completions.create({ model: "gpt-4o-mini", messages, stream: true, stream_options: { include_usage: true } })
    let atFirstEvent: number | undefined
    let events = 0
    for await (const _ of stream) {
      if (events++ === 0) atFirstEvent = rows().length
    }
    const afterStream = rows()
    expect(events).toBeGreaterThan(1)
    expect(atFirstEvent).toBe(before + 2)
    expect(afterStream.length).toBe(before + 3)
    expect(afterStream[before + 1]!.bytes).toBe(0)
    expect(afterStream[before + 2]!.bytes).toBeGreaterThan(0)
  })
})
