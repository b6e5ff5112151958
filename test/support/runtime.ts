/**
 * The one way a test builds a ManagedRuntime: its layer over Settings made from the test's
 * overrides (makeSettings: the defaults for whatever it does not set), disposed by the hook it is
 * given — `afterAll` for a file's runtime, `onTestFinished` for a test's own — or by the caller.
 *
 * No vitest import here: child scripts (startStore.ts) and test/support/gateway.ts use it outside
 * vitest's runner, where importing vitest throws.
 */
import { Layer, ManagedRuntime } from "effect"
import { type GatewaySettings, makeSettings, Settings } from "../../src/domain/config.ts"

export const testRuntime = <ROut, E>(
  layer: Layer.Layer<ROut, E, Settings>,
  overrides: Partial<GatewaySettings> = {},
  disposeWith?: (dispose: () => Promise<void>) => void
): ManagedRuntime.ManagedRuntime<ROut | Settings, E> => {
  const runtime = ManagedRuntime.make(layer.pipe(Layer.provideMerge(Layer.succeed(Settings, makeSettings(overrides)))))
  disposeWith?.(() => runtime.dispose())
  return runtime
}
