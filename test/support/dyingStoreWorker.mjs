// The store worker, made to die for tests (test/store/ChatStore.test.ts): it exits at once, before
// running anything it received, when a reservation counts exactly 13 input tokens — a crash at a known point.
import { parentPort } from "node:worker_threads"

await import("../../src/store/storeWorker.mjs")

parentPort.on("message", (message) => {
  if (message._tag === "Run" && message.calls.some((c) => c.op === "reserve" && c.args.sizing.inputTokens === 13)) process.exit(3)
})
