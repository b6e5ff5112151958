/**
 * The service's receipt signing key (Ed25519, node:crypto) and the rule for sealing a receipt.
 *
 * The private key never enters the database: it is read from TOLLGATE_RECEIPT_KEY_FILE, or for a
 * SQLite store from `receipt-signing-key.pem` beside the database file, or for PostgreSQL from
 * `./data/receipt-signing-key.pem` of the instance (created with mode 0600 on first start); an
 * in-memory store gets an ephemeral key. With PostgreSQL every instance registers its public key in
 * the shared `receipt_keys`, so every instance serves every instance's public keys. Public keys are recorded in
 * `receipt_keys` (kept after rotation) and served at GET /v1/receipts/keys.
 *
 * Rotation: start with TOLLGATE_RECEIPT_KEY_FILE naming a new file (created if missing). The new key
 * signs from then on; every other key stays in `receipt_keys` with `retired_at` set, so receipts it
 * signed keep verifying and the audit can tell that nothing was signed with it after retirement.
 */
import { Clock, Effect, Layer, Option } from "effect"
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from "node:crypto"
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { receiptKeyId } from "../../spec/audit.ts"
import { type SealedReceipt, sealReceipt, type UnsignedReceipt } from "../../spec/receipt.ts"
import { Settings } from "../domain/config.ts"
import { ReceiptKey } from "../store/ChatStore.ts"
import { isPostgresUrl, sqliteFilename } from "../domain/databaseUrl.ts"
import { ReceiptKeysRepo } from "../store/receiptKeysRepo.ts"
import { fastestSealer } from "../store/sodium.ts"

export interface PublicReceiptKey {
  readonly id: string
  readonly algorithm: "Ed25519"
  readonly public_key: string
  readonly created_at: string
  readonly retired_at: string | null
}

const keyFileFor = (databaseUrl: string, configured: Option.Option<string>): string | undefined => {
  if (Option.isSome(configured)) return configured.value
  // PostgreSQL: the key is the instance's own, never in the database: a file on its disk.
  if (isPostgresUrl(databaseUrl)) return join("data", "receipt-signing-key.pem")
  const file = sqliteFilename(databaseUrl)
  return file === ":memory:" ? undefined : join(dirname(file), "receipt-signing-key.pem")
}

const loadOrCreate = (path: string | undefined): KeyObject => {
  if (path !== undefined && existsSync(path)) return createPrivateKey(readFileSync(path, "utf8"))
  const { privateKey } = generateKeyPairSync("ed25519")
  if (path !== undefined) {
    mkdirSync(dirname(path), { recursive: true })
    writeFileSync(path, privateKey.export({ type: "pkcs8", format: "pem" }) as string, { mode: 0o600 })
  }
  return privateKey
}

export { sealReceipt }

export class ReceiptSigner extends Effect.Service<ReceiptSigner>()("tollgate/ReceiptSigner", {
  effect: Effect.gen(function* () {
    const settings = yield* Settings
    const repo = yield* ReceiptKeysRepo
    const privateKey = yield* Effect.try(() => loadOrCreate(keyFileFor(settings.databaseUrl, settings.receiptKeyFile))).pipe(Effect.orDie)
    const publicPem = createPublicKey(privateKey).export({ type: "spki", format: "pem" }) as string
    const keyId = receiptKeyId(publicPem)
    const now = yield* Clock.currentTimeMillis
    const shared = isPostgresUrl(settings.databaseUrl)
    const retired = yield* repo.withTransaction(
      Effect.gen(function* () {
        yield* repo.register(keyId, publicPem, now)
        // Back to a key that was retired: it signs again, so it is no longer retired.
        yield* repo.unretire(keyId)
        // PostgreSQL: several instances sign at once, each with its own key; starting one retires
        // no other instance's key: every registered key stays active (no automatic retirement).
        if (shared) return []
        return yield* repo.retireOthers(keyId, now)
      })
    ).pipe(Effect.orDie)
    if (retired.length > 0) {
      yield* Effect.logInfo(`receipt signing key rotated: ${keyId} signs from now on; retired ${retired.map((r) => r.id).join(", ")}`)
    }

    const seal: (unsigned: UnsignedReceipt) => SealedReceipt = fastestSealer(privateKey)

    const publicKeys = Effect.map(
      repo.all(),
      (rows): ReadonlyArray<PublicReceiptKey> =>
        rows.map((r) => ({
          id: r.id,
          algorithm: "Ed25519",
          public_key: r.public_key,
          created_at: new Date(r.created_at).toISOString(),
          retired_at: r.retired_at === null ? null : new Date(r.retired_at).toISOString()
        }))
    ).pipe(Effect.orDie)

    /** The private key itself: only for the store worker (src/store/storeWorker.ts), which signs in settlement. */
    const signingKey = privateKey

    return { keyId, publicPem, seal, signingKey, publicKeys } as const
  }),
  dependencies: [ReceiptKeysRepo.Default]
}) {}

/** The signing key for the store port's settlement transaction (src/store/ChatStore.ts). */
export const ReceiptKeyLive = Layer.effect(
  ReceiptKey,
  Effect.map(ReceiptSigner, (s) => ({ keyId: s.keyId, signingKey: s.signingKey }))
)
