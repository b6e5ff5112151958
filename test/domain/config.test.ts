/**
 * Settings from the environment: a value the gateway cannot use is refused at start with a message
 * naming the variable, never a stack trace from deep inside a layer.
 */
import { ConfigProvider, Effect, Exit, Layer } from "effect"
import { describe, expect, it } from "vitest"
import { Settings, SettingsFromEnv } from "../../src/domain/config.ts"

const settingsWith = (env: Record<string, string>) =>
  Effect.runPromiseExit(
    Effect.map(Settings, (s) => s.databaseUrl).pipe(
      Effect.provide(SettingsFromEnv.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))))
    )
  )

describe("SettingsFromEnv", () => {
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
})
