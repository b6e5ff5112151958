/**
 * The one upstream transport (transport.ts) as both HTTP adapters use it, against the real-HTTP mock.
 */
import { Cause, Effect, Exit, Fiber, Option } from "effect"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import type { RouteConfig } from "../../src/domain/config.ts"
import { makeAnthropicProvider } from "../../src/providers/anthropic.ts"
import { makeOpenAIProvider } from "../../src/providers/openai.ts"
import type { ChatProvider } from "../../src/providers/Provider.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"

const route: RouteConfig = { name: "r", provider: "p", upstream_model: "m", max_output_tokens: 100, auto: true }

let mock: MockUpstream
beforeAll(async () => {
  mock = await startMockUpstream()
})
afterAll(async () => {
  await mock.close()
})
afterEach(() => mock.reset())

/**
 * Open a stream of `provider` and read its events' data into `got`: to the end, or until it holds
 * `until` of them (then stop reading mid-body; the scope closes the connection). A failure of the
 * opening or the body is the Effect's failure.
 */
const readStream = (provider: ChatProvider, got: Array<string> = [], until = Number.POSITIVE_INFINITY) =>
  Effect.scoped(
    Effect.flatMap(provider.stream(route, { messages: [{ role: "user", content: "x" }], stream: true }), (events) =>
      Effect.tryPromise({
        try: async () => {
          for await (const batch of events) {
            got.push(...batch)
            if (got.length >= until) break
          }
          return got
        },
        catch: (e) => e
      })
    )
  )

/** What the process emitted as `event` while `run` ran (listened to first, so nothing else handles it). */
const heard = async (event: "uncaughtException" | "unhandledRejection", run: () => Promise<void>): Promise<Array<unknown>> => {
  const seen: Array<unknown> = []
  const listener = (e: unknown) => void seen.push(e)
  // Both events through EventEmitter's own signature (process's overloads take one event name each).
  const emitter: NodeJS.EventEmitter = process
  emitter.prependListener(event, listener)
  try {
    await run()
  } finally {
    emitter.removeListener(event, listener)
  }
  return seen
}

const adapters: ReadonlyArray<[string, (timeoutMs?: number) => ChatProvider]> = [
  ["openai", (timeout_ms) => makeOpenAIProvider("p", { type: "openai", base_url: mock.url, timeout_ms }, 5_000)],
  ["anthropic", (timeout_ms) => makeAnthropicProvider("p", { type: "anthropic", base_url: mock.url, timeout_ms }, 5_000)]
]

describe.each(adapters)("the %s adapter on the shared transport", (_, make) => {
  it("closing a stream mid-body (client hung up) aborts the upstream request without an unhandled 'error' event", async () => {
    const provider = make()
    const uncaught = await heard("uncaughtException", async () => {
      mock.pushBehavior({ reply: "one two three four five six seven eight nine ten eleven twelve", chunkDelayMs: 40 })
      // Stops reading mid-body after two events; the scope then closes the connection.
      const firstTwo = await Effect.runPromise(readStream(provider, [], 2))
      expect(firstTwo.length).toBeGreaterThanOrEqual(2)
      // The upstream saw its client go before the end; the client's 'error' (emitted on the next
      // tick of the destroy) would have come before that.
      await expect.poll(() => mock.abandoned).toBe(1)
    })
    expect(uncaught).toEqual([])
  })

  it("a stream opened and never read is released when its scope closes: the upstream request is aborted, not left to run to its end", async () => {
    mock.pushBehavior({ reply: "one two three four five six seven eight nine ten eleven twelve", chunkDelayMs: 40 })
    // The scope closes as soon as the stream is open: nothing iterates its events, nothing returns them.
    await Effect.runPromise(Effect.scoped(Effect.asVoid(make().stream(route, { messages: [{ role: "user", content: "x" }], stream: true }))))
    await expect.poll(() => mock.abandoned).toBe(1)
  })

  it("an `opened` callback that throws (a bug of ours) fails the opening with that defect, never an upstream failure or an unhandled rejection, and releases the request", async () => {
    const provider = make()
    const unhandled = await heard("unhandledRejection", async () => {
      mock.pushBehavior({ reply: "one two three four five six seven eight nine ten eleven twelve", chunkDelayMs: 40 })
      const bug = new Error("a bug in the opened callback")
      const exit = await Effect.runPromiseExit(
        Effect.scoped(
          provider.stream(route, { messages: [{ role: "user", content: "x" }], stream: true }, () => {
            throw bug
          })
        )
      )
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause) && Option.getOrUndefined(Cause.dieOption(exit.cause))).toBe(bug)
      await expect.poll(() => mock.abandoned).toBe(1)
    })
    expect(unhandled).toEqual([])
  })

  it("a client that hangs up while the stream is still opening aborts the upstream request", async () => {
    mock.pushBehavior({ delayMs: 20_000 }) // headers (and the 60 s timeout) far later than the test waits
    const opening = Effect.runFork(Effect.scoped(make(60_000).stream(route, { messages: [{ role: "user", content: "x" }], stream: true })))
    await expect.poll(() => mock.calls).toBe(1)
    const interrupted = Effect.runPromise(Fiber.interrupt(opening))
    // Aborted now, not once the headers come: the upstream sees its client go before it answers.
    await expect.poll(() => mock.abandoned, { timeout: 5_000 }).toBe(1)
    await interrupted
  })

  it("a client that hangs up while a completion is pending aborts the upstream request", async () => {
    mock.pushBehavior({ delayMs: 20_000 }) // the answer (and the 60 s timeout) far later than the test waits
    const pending = Effect.runFork(make(60_000).complete(route, { messages: [{ role: "user", content: "x" }] }))
    await expect.poll(() => mock.calls).toBe(1)
    const interrupted = Effect.runPromise(Fiber.interrupt(pending))
    await expect.poll(() => mock.abandoned, { timeout: 5_000 }).toBe(1)
    await interrupted
  })

  it("a stream answered with an error status fails its opening with that status and the upstream's message", async () => {
    mock.pushBehavior({ status: 503, reply: "overloaded right now" })
    const failure = await Effect.runPromise(Effect.flip(readStream(make())))
    expect(failure).toMatchObject({ _tag: "UpstreamFailure", status: 503, retryable: true })
    expect(String((failure as { message: string }).message)).toContain("overloaded right now")
  })

  it("a stream whose connection is reset mid-body fails with an UpstreamFailure after the events before it", async () => {
    mock.pushBehavior({ reply: "a b c d e f g h", chunks: 8, resetAfterChunks: 2, chunkDelayMs: 5 })
    const read: Array<string> = []
    const failure = await Effect.runPromise(Effect.flip(readStream(make(), read)))
    expect(failure).toMatchObject({ _tag: "UpstreamFailure", retryable: true })
    // The two content events written before the reset reached the reader first (with the head events).
    expect(read.length).toBeGreaterThanOrEqual(2)
  })

  it("a slow upstream is a retryable timeout failure", async () => {
    mock.pushBehavior({ delayMs: 400 })
    const failure = await Effect.runPromise(Effect.flip(make(100).complete(route, { messages: [{ role: "user", content: "x" }] })))
    expect(failure).toMatchObject({ reason: "timeout", retryable: true })
  })
})

describe("a completion's timeout", () => {
  it("bounds the whole completion: a body that keeps dribbling (each gap within undici's idle timeout) fails as a timeout when it passes, and the request is aborted then", async () => {
    let closedEarly = 0
    const server = createServer((_, res) => {
      res.writeHead(200, { "content-type": "application/json" })
      res.write("{")
      const drip = setInterval(() => res.write(" "), 40)
      res.once("close", () => {
        clearInterval(drip)
        if (!res.writableFinished) closedEarly++
      })
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    try {
      const { port } = server.address() as AddressInfo
      const provider = makeOpenAIProvider("p", { type: "openai", base_url: `http://127.0.0.1:${port}/v1`, timeout_ms: 300 }, 5_000)
      const started = performance.now()
      const failure = await Effect.runPromise(Effect.flip(provider.complete(route, { messages: [{ role: "user", content: "x" }] })))
      expect(failure).toMatchObject({ reason: "timeout", retryable: true })
      expect(performance.now() - started).toBeLessThan(2_000)
      await expect.poll(() => closedEarly, { timeout: 1_000 }).toBe(1)
    } finally {
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    }
  })
})

const streamAdapters: ReadonlyArray<[string, (url: string) => ChatProvider]> = [
  ["openai", (url) => makeOpenAIProvider("p", { type: "openai", base_url: url }, 5_000)],
  ["anthropic", (url) => makeAnthropicProvider("p", { type: "anthropic", base_url: url }, 5_000)]
]

describe.each(streamAdapters)("the %s adapter's stream, read to its end", (_, make) => {
  it("every event's data in order, nothing abandoned, and the next stream on the same kept-alive connection", async () => {
    // A mock of its own: the other tests' aborted responses may still be closing on the shared one.
    const own = await startMockUpstream()
    try {
    const provider = make(own.url)
    own.pushBehavior({ reply: "one two three four five", chunks: 5 })
    own.pushBehavior({ reply: "six seven", chunks: 2 })
    const first = await Effect.runPromise(readStream(provider))
    await new Promise((r) => setTimeout(r, 50))
    const second = await Effect.runPromise(readStream(provider))
    // Each event is a JSON object; the text they carry is the reply (OpenAI: the deltas; Anthropic: translated into them).
    const text = (events: ReadonlyArray<string>) =>
      events.map((e) => (JSON.parse(e) as { choices?: Array<{ delta?: { content?: string } }> }).choices?.[0]?.delta?.content ?? "").join("")
    expect(text(first).trim()).toBe("one two three four five")
    expect(text(second).trim()).toBe("six seven")
    expect(own.abandoned).toBe(0)
    // The second request came on the connection the first left in the pool (ended, not aborted).
    expect(own.connections).toBe(1)
    } finally {
      await own.close()
    }
  })

})
