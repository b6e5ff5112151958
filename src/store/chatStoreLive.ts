/**
 * The store port's implementation DATABASE_URL names: `ChatStore.Default` over the SQLite file (its
 * store worker or inline), or `PgChatStoreLive` over PostgreSQL (src/store/pgChatStore.ts).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer, Option } from "effect"
import { Settings } from "../domain/config.ts"
import { isPostgresUrl } from "../domain/databaseUrl.ts"
import { ChatStore, ReceiptKey } from "./ChatStore.ts"
import { Sqlite } from "./Database.ts"
import { PgChatStoreLive } from "./pgChatStore.ts"

export const ChatStoreLive: Layer.Layer<ChatStore, never, Settings | SqlClient.SqlClient | ReceiptKey> = Layer.unwrapEffect(
  Effect.gen(function* () {
    const settings = yield* Settings
    if (isPostgresUrl(settings.databaseUrl)) return PgChatStoreLive
    const sqlite = yield* Effect.serviceOption(Sqlite)
    if (Option.isNone(sqlite)) return yield* Effect.dieMessage("a SQLite DATABASE_URL without the Sqlite store layer (StoreDatabaseLive provides it)")
    return ChatStore.Default.pipe(Layer.provide(Layer.succeed(Sqlite, sqlite.value))) as Layer.Layer<ChatStore, never, SqlClient.SqlClient | ReceiptKey | Settings>
  })
)
