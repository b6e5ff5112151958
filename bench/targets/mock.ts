/**
 * Bench child: the test mock upstream (test/support/mockUpstream.ts, the same handlers and wire
 * shapes) on loopback, set up as the benchmarks' baseline: no request recording, real token counts
 * memoised per distinct prompt (the mock's own), a fixed delay before the answer and between chunks.
 *
 * Flags: --delay MS (before headers, default 20), --chunk-delay MS (between SSE content events,
 *        default 1), --chunks N (content events per stream, default 20), --reply TEXT, --port N.
 * Prints one JSON line `{"ready":true,"port":N}` when listening.
 */
import { type MockBehavior, startMockUpstream } from "../../test/support/mockUpstream.ts"
import { arg, numArg } from "../lib/args.ts"

const reply = arg("--reply")
const behavior: MockBehavior = {
  delayMs: numArg("--delay", 20),
  chunkDelayMs: numArg("--chunk-delay", 1),
  chunks: numArg("--chunks", 20),
  ...(reply === undefined ? {} : { reply })
}

const mock = await startMockUpstream({ port: numArg("--port", 0), behavior, record: false })
process.stdout.write(JSON.stringify({ ready: true, port: mock.port }) + "\n")
const stop = () => {
  mock.close().then(
    () => process.exit(0),
    () => process.exit(1)
  )
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
