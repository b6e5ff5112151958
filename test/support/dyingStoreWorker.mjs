// The store worker, made to die for tests (test/store/ChatStore.test.ts): it exits at once, before
// running anything it received, when a reservation counts exactly 13 input tokens — a crash at a known point.
// The check wraps the port read the worker takes its messages with (`receiveMessageOnPort`, woken by
// its bell, docs/decisions/0023): the worker runs a message's batch as soon as it has read it.
import { syncBuiltinESMExports } from "node:module"
import threads from "node:worker_threads"

const dies = (message) => message._tag === "Run" && message.calls.some((c) => c.op === "reserve" && c.args.sizing.inputTokens === 13)
const read = threads.receiveMessageOnPort
threads.receiveMessageOnPort = (port) => {
  const next = read(port)
  if (next !== undefined && dies(next.message)) process.exit(3)
  return next
}
syncBuiltinESMExports()

await import("../../src/store/storeWorker.mjs")
