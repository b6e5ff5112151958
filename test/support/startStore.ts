/**
 * A script that starts the store the way a program does: a top-level await on building the layers,
 * with nothing else keeping Node's event loop alive (test/store/ChatStore.test.ts runs it as a child).
 * Prints the store's health, then shuts it down.
 */
import { Layer } from "effect"
import { ReceiptKeyLive, ReceiptSigner } from "../../src/services/ReceiptSigner.ts"
import { ChatStore } from "../../src/store/ChatStore.ts"
import { DatabaseLive } from "../../src/store/Database.ts"
import { testRuntime } from "./runtime.ts"

const layer = ChatStore.Default.pipe(
  Layer.provide(ReceiptKeyLive),
  Layer.provideMerge(ReceiptSigner.Default),
  Layer.provideMerge(DatabaseLive)
)
const runtime = testRuntime(layer, { databaseUrl: `sqlite:${process.argv[2]}` })
const store = await runtime.runPromise(ChatStore)
process.stdout.write(JSON.stringify({ runsIn: store.runsIn, health: store.health() }) + "\n")
await runtime.dispose()
