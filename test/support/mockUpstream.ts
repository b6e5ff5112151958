/**
 * A real HTTP mock upstream (node:http, no framework) that stands in for model
 * providers in end-to-end tests and benchmarks (bench/targets/mock.ts serves the same handlers).
 *
 * Endpoints (relative to `mock.url`, which ends in `/v1`):
 *   POST /v1/chat/completions  OpenAI Chat Completions (JSON and SSE streaming)   mock/openai.ts
 *   POST /v1/messages          Anthropic Messages API (JSON and SSE streaming)    mock/anthropic.ts
 *   GET  /v1/models            OpenAI-style model list                            mock/server.ts
 *   anything else              404 OpenAI-shaped error
 *
 * Faults (delays, error statuses, resets, slow chunks): mock/faults.ts; replies and token counts:
 * mock/replies.ts; the server and its lifecycle: mock/server.ts.
 *
 * Standalone:
 *   npx tsx test/support/mockUpstream.ts --port 9100 --delay 20
 */
import { pathToFileURL } from "node:url"
import { startMockUpstream } from "./mock/server.ts"
import type { MockBehavior, StartMockUpstreamOptions } from "./mock/types.ts"

export { defaultReply, splitIntoChunks } from "./mock/replies.ts"
export { startMockUpstream } from "./mock/server.ts"
export type { MockBehavior, MockUpstream, RecordedRequest, StartMockUpstreamOptions } from "./mock/types.ts"

// ---------------------------------------------------------------------------
// standalone entry point

const isEntryPoint = (): boolean => {
  const entry = process.argv[1]
  if (entry === undefined) return false
  try {
    return import.meta.url === pathToFileURL(entry).href
  } catch {
    return false
  }
}

if (isEntryPoint()) {
  const args = process.argv.slice(2)
  const opt = (name: string): string | undefined => {
    const i = args.indexOf(name)
    return i === -1 ? undefined : args[i + 1]
  }
  const num = (name: string): number | undefined => {
    const v = opt(name)
    if (v === undefined) return undefined
    const n = Number(v)
    if (!Number.isFinite(n)) throw new Error(`${name} expects a number, got ${v}`)
    return n
  }
  if (args.includes("--help") || args.includes("-h")) {
    console.log(
      "Usage: tsx test/support/mockUpstream.ts [--port 9100] [--host 127.0.0.1] [--delay MS] " +
        "[--chunk-delay MS] [--status N] [--reply TEXT] [--omit-usage] [--record]"
    )
    process.exit(0)
  }
  const behavior: MockBehavior = {}
  const delay = num("--delay")
  if (delay !== undefined) behavior.delayMs = delay
  const chunkDelay = num("--chunk-delay")
  if (chunkDelay !== undefined) behavior.chunkDelayMs = chunkDelay
  const status = num("--status")
  if (status !== undefined) behavior.status = status
  const reply = opt("--reply")
  if (reply !== undefined) behavior.reply = reply
  if (args.includes("--omit-usage")) behavior.omitUsage = true
  const startOpts: StartMockUpstreamOptions = { behavior, record: args.includes("--record") }
  const port = num("--port")
  if (port !== undefined) startOpts.port = port
  const host = opt("--host")
  if (host !== undefined) startOpts.host = host
  startMockUpstream(startOpts).then(
    (mock) => {
      console.log(`mock upstream listening on ${mock.url}`)
      const shutdown = (): void => {
        mock.close().then(() => process.exit(0), () => process.exit(1))
      }
      process.once("SIGINT", shutdown)
      process.once("SIGTERM", shutdown)
    },
    (err: unknown) => {
      console.error(err)
      process.exit(1)
    }
  )
}
