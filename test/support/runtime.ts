/**
 * The one way a test builds a ManagedRuntime: its layer over Settings made from the test's
 * overrides (makeSettings: the defaults for whatever it does not set), disposed by the hook it is
 * given — `afterAll` for a file's runtime, `onTestFinished` for a test's own — or by the caller.
 *
 * No vitest import here: child scripts (startStore.ts) and test/support/gateway.ts use it outside
 * vitest's runner, where importing vitest throws.
 */
import { Effect, Layer, ManagedRuntime } from "effect"
import { type GatewaySettings, makeSettings, Settings } from "../../src/domain/config.ts"
import { RateLimiter } from "../../src/services/RateLimiter.ts"

export const testRuntime = <ROut, E>(
  layer: Layer.Layer<ROut, E, Settings>,
  overrides: Partial<GatewaySettings> = {},
  disposeWith?: (dispose: () => Promise<void>) => void
): ManagedRuntime.ManagedRuntime<ROut | Settings, E> => {
  const runtime = ManagedRuntime.make(layer.pipe(Layer.provideMerge(Layer.succeed(Settings, makeSettings(overrides)))))
  disposeWith?.(() => runtime.dispose())
  return runtime
}

/** The in-memory limiter of a runtime (RateLimiter.Default): the only one with `peek`; dies on a shared one. */
export const localLimiter = Effect.flatMap(RateLimiter, (l) => (l.mode === "local" ? Effect.succeed(l) : Effect.dieMessage("not the in-memory rate limiter")))
