/**
 * Effort profiles for the model-based tests. `npm test` runs the fast profile; `npm run test:deep`
 * (TOLLGATE_DEEP=1) runs ≥ 10,000 runs per service-level model and prints the counts.
 * TOLLGATE_MODEL_RUNS / TOLLGATE_GATEWAY_RUNS override either profile (e.g. to replay quickly).
 */
export const deep = Boolean(process.env["TOLLGATE_DEEP"])

const fromEnv = (name: string): number | undefined => {
  const v = process.env[name]
  return v === undefined || v === "" ? undefined : Number(v)
}

/** Runs per service-level model (Ledger, IdempotencyStore, RateLimiter, KeyRegistry). */
export const serviceRuns = fromEnv("TOLLGATE_MODEL_RUNS") ?? (deep ? 10_000 : 200)
/**
 * Runs per model of the money path through the store port (Ledger, idempotency): each command is a
 * round trip to the store worker and a COMMIT on a SQLite file (synchronous=FULL, as production), so
 * the deep profile runs fewer of them than of the in-memory models to stay within minutes.
 */
export const portRuns = fromEnv("TOLLGATE_MODEL_RUNS") ?? (deep ? 3_000 : 200)
/**
 * The same two counts on PostgreSQL: each command is several round trips over loopback and a
 * synchronous COMMIT, and the box is shared, so `npm test` runs a handful (the suite proves the
 * commands and checks work on the engine) and `npm run test:deep` the real search.
 */
export const pgPortRuns = fromEnv("TOLLGATE_PG_MODEL_RUNS") ?? (deep ? 1_000 : 15)
export const pgScheduledRuns = fromEnv("TOLLGATE_PG_SCHEDULED_RUNS") ?? (deep ? 300 : 5)

/** The gateway model at the budget edge on PostgreSQL (its checks read through psql: slower still). */
export const pgGatewayRuns = fromEnv("TOLLGATE_PG_GATEWAY_RUNS") ?? (deep ? 50 : 3)
/** Runs of the gateway-level model (real HTTP gateway + mock upstream): fewer, each run is heavier. */
export const gatewayRuns = fromEnv("TOLLGATE_GATEWAY_RUNS") ?? (deep ? 200 : 25)
/**
 * Most commands per run. The deep profile trades sequence length for run count to finish 10,000
 * runs per model in minutes: every command is followed by a full invariant check.
 */
export const maxCommands = deep ? 15 : 25
/** vitest timeout for one property. */
export const propertyTimeoutMs = deep ? 1_800_000 : 60_000
/** Runs of the scheduled (interleaving) properties, on top of serviceRuns. */
export const scheduledRuns = fromEnv("TOLLGATE_SCHEDULED_RUNS") ?? (deep ? 1_000 : 50)
