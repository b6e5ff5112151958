/**
 * Settings from the environment: a value the gateway cannot use is refused at start with a message
 * naming the variable, never a stack trace from deep inside a layer.
 */
import { ConfigProvider, Effect, Exit, Layer, Option } from "effect"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { makeSettings, Settings, SettingsFromEnv, upstreamCallBoundMs } from "../../src/domain/config.ts"
import { mockGatewayFile } from "../support/gateway.ts"

const settingsWith = (env: Record<string, string>) =>
  Effect.runPromiseExit(
    Effect.map(Settings, (s) => s.databaseUrl).pipe(
      Effect.provide(SettingsFromEnv.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))))
    )
  )

describe("SettingsFromEnv", () => {
  it("reads the OTLP traces URL as the OpenTelemetry SDKs do: the traces endpoint as given, else the base endpoint + /v1/traces, else tracing off", async () => {
    const tracesUrl = (env: Record<string, string>) =>
      Effect.runPromise(
        Effect.map(Settings, (s) => s.otlpTracesUrl).pipe(
          Effect.provide(SettingsFromEnv.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))))
        )
      )
    expect(await tracesUrl({})).toStrictEqual(Option.none())
    expect(await tracesUrl({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318/" })).toStrictEqual(Option.some("http://collector:4318/v1/traces"))
    expect(
      await tracesUrl({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318", OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://traces:4318/custom" })
    ).toStrictEqual(Option.some("http://traces:4318/custom"))
  })

  it("takes a sqlite: DATABASE_URL, and defaults to the file under ./data", async () => {
    expect(await settingsWith({ DATABASE_URL: "sqlite:/var/lib/tollgate/t.db" })).toStrictEqual(Exit.succeed("sqlite:/var/lib/tollgate/t.db"))
    expect(await settingsWith({})).toStrictEqual(Exit.succeed("sqlite:./data/tollgate.db"))
  })

  it("takes a postgres:// (or postgresql://) DATABASE_URL: the scale-out store", async () => {
    expect(await settingsWith({ DATABASE_URL: "postgres://tollgate@127.0.0.1/test" })).toStrictEqual(Exit.succeed("postgres://tollgate@127.0.0.1/test"))
    expect(await settingsWith({ DATABASE_URL: "postgresql://db:5432/t" })).toStrictEqual(Exit.succeed("postgresql://db:5432/t"))
  })

  it("refuses any other DATABASE_URL at start, naming the variable and why", async () => {
    const exit = await settingsWith({ DATABASE_URL: "mysql://tollgate@127.0.0.1/test" })
    expect(Exit.isFailure(exit)).toBe(true)
    const message = Exit.isFailure(exit) ? String(exit.cause) : ""
    expect(message).toContain("DATABASE_URL")
    expect(message).toContain("must be sqlite:<path>")
  })

  it("refuses a reservation TTL that an upstream call can outlive, naming the variable, without a stack trace (issue 19, finding 3)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "tg-config-"))
    const configPath = join(dir, "gateway.json")
    writeFileSync(configPath, JSON.stringify(mockGatewayFile("http://127.0.0.1:1/v1")))
    // An OpenAI-compatible upstream with the defaults: 60 s attempts within a 120 s deadline, one retry:
    // a call may run 2 × (60 s + 2.05 s backoff) = 124.1 s.
    const exit = await settingsWith({ TOLLGATE_CONFIG: configPath, TOLLGATE_RESERVATION_TTL_MS: "60000" })
    expect(Exit.isFailure(exit)).toBe(true)
    const message = Exit.isFailure(exit) ? String(exit.cause) : ""
    expect(message).toContain("TOLLGATE_RESERVATION_TTL_MS")
    expect(message).toContain("set it above 124100")
    expect(message).not.toMatch(/\n\s+at /)
    // The same TTL is fine once the upstream bound is under it: 5 s attempts.
    expect(Exit.isSuccess(await settingsWith({ TOLLGATE_CONFIG: configPath, TOLLGATE_RESERVATION_TTL_MS: "60000", TOLLGATE_UPSTREAM_TIMEOUT_MS: "5000" }))).toBe(true)
    expect(Exit.isSuccess(await settingsWith({ TOLLGATE_CONFIG: configPath }))).toBe(true)
  })

  it("the upstream bound counts the longest provider timeout, the deadline, and every attempt with its backoff", () => {
    const base = makeSettings({ upstreamTimeoutMs: 10_000, upstreamDeadlineMs: 30_000, upstreamRetries: 1 })
    // One demo route (no delay): 2 attempts × (0 + 2050 ms backoff).
    expect(upstreamCallBoundMs(base)).toBe(4_100)
    const slow = { ...base, gateway: mockGatewayFile("http://127.0.0.1:1/v1") }
    expect(upstreamCallBoundMs(slow)).toBe(2 * (10_000 + 2_050))
    const three = { ...slow, gateway: mockGatewayFile("http://127.0.0.1:1/v1", ["a", "b", "c"].map((name) => ({ name, provider: "mock", upstream_model: "m", max_output_tokens: 16, auto: true }))) }
    expect(upstreamCallBoundMs(three)).toBe(30_000 + 10_000)
  })
})
