/**
 * What the governed bench children share: the gateway file they serve (one openai-type provider at
 * the mock upstream, and a default project whose budget and rate limit never bind: the bench
 * measures cost, not refusals), and starting `npm start`'s layer graph (ServerLive) on settings.
 */
import { HttpServer } from "@effect/platform"
import { Effect, Layer, ManagedRuntime } from "effect"
import { type GatewayFile, type GatewaySettings, Settings } from "../../src/domain/config.ts"
import { ServerLive } from "../../src/server.ts"
import { Bootstrap } from "../../src/services/Bootstrap.ts"

export const benchGateway = (upstream: string, model: string): GatewayFile => ({
  providers: { mock: { type: "openai", base_url: `${upstream}/v1` } },
  routes: [{ name: model, provider: "mock", upstream_model: model, max_output_tokens: 4096, auto: true }],
  rate_cards: [{ version: "rc_2020-01", effective_from: "2020-01-01T00:00:00Z", prices: { [model]: { input: 150, cached_input: 75, output: 600 } } }],
  default_project: { budget_credits: 1_000_000_000_000_000, requests_per_minute: 60_000_000, burst: 1_000_000 }
})

/** ServerLive on `settings`: its port, the development key when this start created the project, and how to stop it. */
export const startServer = async (settings: GatewaySettings) => {
  const runtime = ManagedRuntime.make(ServerLive.pipe(Layer.provide(Layer.succeed(Settings, settings))))
  const ready = await runtime.runPromise(
    Effect.gen(function* () {
      const server = yield* HttpServer.HttpServer
      const bootstrap = yield* Bootstrap
      return { port: server.address._tag === "TcpAddress" ? server.address.port : 0, key: bootstrap.firstStart?.developmentKey }
    })
  )
  return { ...ready, dispose: () => runtime.dispose() }
}
