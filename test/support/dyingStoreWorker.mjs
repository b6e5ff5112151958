// The store worker, made to die for tests (test/store/ChatStore.test.ts): it exits at once, before
// running anything it received, when a reservation counts exactly 13 input tokens — a crash at a known point.
// The check wraps the worker's own message listener: the worker runs a message's batch as soon as it has read it.
import { parentPort } from "node:worker_threads"

const dies = (message) => message._tag === "Run" && message.calls.some((c) => c.op === "reserve" && c.args.sizing.inputTokens === 13)
const on = parentPort.on.bind(parentPort)
parentPort.on = (event, listener) =>
  on(event, event === "message" ? (message) => (dies(message) ? process.exit(3) : listener(message)) : listener)

await import("../../src/store/storeWorker.mjs")
