/**
 * The rulebook: pure reference models of Tollgate's governance rules (see docs/style.md).
 * The services follow them, the model-based tests check the services against them, and
 * `tollgate audit` uses them to check a live database. If a rule changes, it changes here first.
 * This is also the entry of the package @tollgate/spec (spec/package.json, spec/README.md), built
 * for Node and browsers by scripts/build-spec.mjs: what a customer verifies Tollgate with.
 */
export * as CanonicalJson from "./canonicalJson.ts"
export * as Receipt from "./receipt.ts"
export * as Ed25519 from "./ed25519.ts"
export * as Idempotency from "./idempotency.ts"
export * as Keys from "./keys.ts"
export * as Ledger from "./ledger.ts"
export * as Pricing from "./pricing.ts"
export * as RateLimit from "./rateLimit.ts"
export * as Merkle from "./merkle.ts"
export * as Checkpoint from "./checkpoint.ts"
export * as Periods from "./periods.ts"
export * as Scopes from "./scopes.ts"
export * as Export from "./export.ts"
export * as Statement from "./statement.ts"
export * as Verify from "./verify.ts"
