/**
 * fc.assert with the profile's run count, reporting the seed and path on failure (fast-check puts
 * them in the error message; this repeats them on stderr so they survive vitest's truncation).
 * Replay a failure with TOLLGATE_MODEL_SEED=<seed> TOLLGATE_MODEL_PATH=<path>.
 */
import fc from "fast-check"

export const assertProperty = async <Ts>(
  name: string,
  property: fc.IAsyncPropertyWithHooks<Ts> | fc.IAsyncProperty<Ts>,
  numRuns: number
): Promise<void> => {
  const seedEnv = process.env["TOLLGATE_MODEL_SEED"]
  const pathEnv = process.env["TOLLGATE_MODEL_PATH"]
  const params: fc.Parameters<Ts> = {
    numRuns,
    endOnFailure: false,
    ...(seedEnv !== undefined && seedEnv !== "" ? { seed: Number(seedEnv) } : {}),
    ...(pathEnv !== undefined && pathEnv !== "" ? { path: pathEnv } : {})
  }
  const details = await fc.check(property, params)
  if (details.failed) {
    const replay = `TOLLGATE_MODEL_SEED=${details.seed} TOLLGATE_MODEL_PATH=${details.counterexamplePath ?? ""}`
    process.stderr.write(`\n[model] ${name} FAILED — seed ${details.seed}, path ${details.counterexamplePath}\n  replay: ${replay}\n`)
    throw new Error(`${name}: ${fc.defaultReportMessage(details)}\n\nReplay: ${replay}`)
  }
}
