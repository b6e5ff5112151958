/**
 * Webhook settings and signing secrets (issue 42; docs/contract.md "Webhooks").
 *
 * An endpoint's signing secret (`whsec_` + 24 random bytes in base64, the Standard Webhooks form) is
 * shown once, in the answer that creates or rotates it. It must be usable to sign every later
 * delivery, so it cannot be stored as a hash: it is stored ENCRYPTED, AES-256-GCM under the server's
 * webhook key, with the endpoint id as associated data (a ciphertext copied onto another endpoint
 * does not open). The key is 32 random bytes in a file created 0600 on first start:
 * TOLLGATE_WEBHOOK_KEY_FILE, else `webhook-secret-key` beside the SQLite file, else (PostgreSQL)
 * `data/webhook-secret-key`; several instances of one PostgreSQL store must share that file. An
 * in-memory store gets a key for the life of the process. The database alone never reveals a secret;
 * neither does a log or an error (none names one).
 *
 * Settings, read from the environment: TOLLGATE_WEBHOOK_ALLOW_PRIVATE=1 (http and
 * private/loopback/link-local addresses), TOLLGATE_WEBHOOK_POLL_MS (how often the worker looks for
 * due deliveries, 1000), TOLLGATE_WEBHOOK_CONCURRENCY (attempts in flight per instance, 8),
 * TOLLGATE_WEBHOOK_RETRY_BASE_MS (the first retry's wait, 5000), TOLLGATE_WEBHOOK_MAX_AGE_MS (how
 * long a delivery is retried, 3 days).
 */
import { Config, Context, Effect, Layer, Option } from "effect"
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto"
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { DEFAULT_RETRY, type RetryPolicy } from "../../spec/events.ts"
import { Settings } from "../domain/config.ts"
import { isPostgresUrl, sqliteFilename } from "../domain/databaseUrl.ts"

export interface WebhookConfig {
  readonly allowPrivate: boolean
  readonly keyFile: Option.Option<string>
  readonly pollMs: number
  readonly concurrency: number
  readonly retry: RetryPolicy
  /** One attempt's bound, connection to response head and body (DESIGN §10: 10 s). */
  readonly timeoutMs: number
  /** How long a claim holds: past it, another instance may take the delivery over. */
  readonly claimMs: number
}

export class WebhookSettings extends Context.Tag("tollgate/WebhookSettings")<WebhookSettings, WebhookConfig>() {}

const bounded = (name: string, min: number, max: number, fallback: number) =>
  Config.integer(name).pipe(
    Config.validate({ message: `must be between ${min} and ${max}`, validation: (n) => n >= min && n <= max }),
    Config.withDefault(fallback)
  )

export const webhookConfig: Config.Config<WebhookConfig> = Config.all({
  allowPrivate: Config.map(Config.string("TOLLGATE_WEBHOOK_ALLOW_PRIVATE").pipe(Config.withDefault("0")), (v) => v === "1" || v === "true"),
  keyFile: Config.option(Config.string("TOLLGATE_WEBHOOK_KEY_FILE")),
  pollMs: bounded("TOLLGATE_WEBHOOK_POLL_MS", 10, 60_000, 1000),
  concurrency: bounded("TOLLGATE_WEBHOOK_CONCURRENCY", 1, 64, 8),
  retry: Config.all({
    baseMs: bounded("TOLLGATE_WEBHOOK_RETRY_BASE_MS", 1, 3_600_000, DEFAULT_RETRY.baseMs),
    capMs: Config.succeed(DEFAULT_RETRY.capMs),
    maxAgeMs: bounded("TOLLGATE_WEBHOOK_MAX_AGE_MS", 1, DEFAULT_RETRY.maxAgeMs, DEFAULT_RETRY.maxAgeMs)
  }),
  timeoutMs: Config.succeed(10_000),
  claimMs: Config.succeed(60_000)
})

/** The settings from the environment (tests may provide their own layer). */
export const WebhookSettingsLive = Layer.effect(WebhookSettings, Effect.orDie(webhookConfig))

/** Where the webhook key lives for this store, or undefined for an in-memory store. */
const keyPath = (keyFile: Option.Option<string>, databaseUrl: string): string | undefined => {
  if (Option.isSome(keyFile)) return keyFile.value
  if (isPostgresUrl(databaseUrl)) return join("data", "webhook-secret-key")
  const file = sqliteFilename(databaseUrl)
  return file === ":memory:" ? undefined : join(dirname(file), "webhook-secret-key")
}

/** The 32-byte key, read, or made (0600) on first start. */
const loadKey = (path: string | undefined): Buffer => {
  if (path === undefined) return randomBytes(32)
  if (!existsSync(path)) {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 })
    writeFileSync(path, randomBytes(32).toString("base64") + "\n", { mode: 0o600, flag: "wx" })
  }
  chmodSync(path, 0o600)
  const key = Buffer.from(readFileSync(path, "utf8").trim(), "base64")
  if (key.length !== 32) throw new Error(`the webhook key file ${path} does not hold 32 bytes in base64`)
  return key
}

/** A new signing secret, in the Standard Webhooks form. */
export const newSigningSecret = (): string => `whsec_${randomBytes(24).toString("base64")}`

export class WebhookSecrets extends Effect.Service<WebhookSecrets>()("tollgate/WebhookSecrets", {
  effect: Effect.gen(function* () {
    const settings = yield* Settings
    const config = yield* WebhookSettings
    const key = yield* Effect.try(() => loadKey(keyPath(config.keyFile, settings.databaseUrl))).pipe(Effect.orDie)
    return {
      /** `v1.<iv>.<tag>.<ciphertext>` (base64url), bound to `endpointId`. */
      seal: (endpointId: string, secret: string): string => {
        const iv = randomBytes(12)
        const cipher = createCipheriv("aes-256-gcm", key, iv)
        cipher.setAAD(Buffer.from(endpointId))
        const body = Buffer.concat([cipher.update(secret, "utf8"), cipher.final()])
        return ["v1", iv, cipher.getAuthTag(), body].map((p) => (typeof p === "string" ? p : p.toString("base64url"))).join(".")
      },
      /** The secret, or undefined when the ciphertext does not open under this key for this endpoint. */
      open: (endpointId: string, sealed: string): string | undefined => {
        const [version, iv, tag, body] = sealed.split(".")
        if (version !== "v1" || iv === undefined || tag === undefined || body === undefined) return undefined
        try {
          const decipher = createDecipheriv("aes-256-gcm", key, Buffer.from(iv, "base64url"))
          decipher.setAAD(Buffer.from(endpointId))
          decipher.setAuthTag(Buffer.from(tag, "base64url"))
          return Buffer.concat([decipher.update(Buffer.from(body, "base64url")), decipher.final()]).toString("utf8")
        } catch {
          return undefined
        }
      }
    } as const
  })
}) {}
