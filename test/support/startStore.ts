/**
 * A script that starts the store the way a program does: a top-level await on building the layers,
 * with nothing else keeping Node's event loop alive (test/store/ChatStore.test.ts runs it as a child).
 * Prints the store's health, then shuts it down.
 */
import { Layer, ManagedRuntime } from "effect"
import { makeSettings, Settings } from "../../src/domain/config.ts"
import { ReceiptKeyLive, ReceiptSigner } from "../../src/services/ReceiptSigner.ts"
import { ChatStore } from "../../src/store/ChatStore.ts"
import { DatabaseLive } from "../../src/store/Database.ts"

const layer = ChatStore.Default.pipe(
  Layer.provide(ReceiptKeyLive),
  Layer.provideMerge(ReceiptSigner.Default),
  Layer.provideMerge(DatabaseLive),
  Layer.provide(Layer.succeed(Settings, makeSettings({ databaseUrl: `sqlite:${process.argv[2]}` })))
)
const runtime = ManagedRuntime.make(layer)
const store = await runtime.runPromise(ChatStore)
process.stdout.write(JSON.stringify({ runsIn: store.runsIn, health: store.health() }) + "\n")
await runtime.dispose()
