/**
 * The PostgreSQL store port with what it needs (its pool, a fresh receipt key, Projects and the
 * signer) as a runtime of its own — one "instance" — for tests and benches that drive the port
 * directly (test/store/pg*.test.ts, bench/pgHotProject.ts). `settings` overrides the defaults.
 */
import { Layer, ManagedRuntime, Option } from "effect"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { type GatewaySettings, makeSettings, Settings } from "../../src/domain/config.ts"
import { Projects } from "../../src/services/Projects.ts"
import { ReceiptKeyLive, ReceiptSigner } from "../../src/services/ReceiptSigner.ts"
import { PgChatStoreLive } from "../../src/store/pgChatStore.ts"
import { PostgresLive } from "../../src/store/Postgres.ts"

export const makePgStoreNode = (url: string, settings: Partial<GatewaySettings> = {}) =>
  ManagedRuntime.make(
    PgChatStoreLive.pipe(
      Layer.provide(ReceiptKeyLive),
      Layer.provideMerge(Layer.mergeAll(Projects.Default, ReceiptSigner.Default)),
      Layer.provideMerge(PostgresLive),
      Layer.provideMerge(
        Layer.succeed(Settings, makeSettings({ databaseUrl: url, receiptKeyFile: Option.some(join(mkdtempSync(join(tmpdir(), "tg-pg-node-")), "k.pem")), ...settings }))
      )
    )
  )
