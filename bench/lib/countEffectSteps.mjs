// Preload (`node --import`) for bench/effectSteps.ts: counts the Effect fiber run loop's steps in
// the Tollgate bench target — one call of a FiberRuntime op handler (Success, OnSuccess, Async, …) is
// one step. EFFECT_STEPS_ROOT names the checkout whose node_modules/effect the target loads (the same
// module instance, so the wrapped prototype is the one its fibers use). On SIGUSR2 the counts so far
// are written to EFFECT_STEPS_OUT.
import { writeFileSync } from "node:fs"

const root = process.env.EFFECT_STEPS_ROOT
const out = process.env.EFFECT_STEPS_OUT
if (root !== undefined && out !== undefined) {
  const Effect = await import(`${root}/node_modules/effect/dist/esm/Effect.js`)
  const proto = Object.getPrototypeOf(Effect.runFork(Effect.never))
  const counts = {}
  for (const name of Object.getOwnPropertyNames(proto)) {
    // The op handlers are the prototype's methods named by op code, which start with a capital.
    if (!/^[A-Z]/.test(name) || typeof proto[name] !== "function") continue
    const handler = proto[name]
    counts[name] = 0
    proto[name] = function (op) {
      counts[name]++
      return handler.call(this, op)
    }
  }
  process.on("SIGUSR2", () => writeFileSync(out, JSON.stringify(counts)))
}
