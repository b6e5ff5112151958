import { defineConfig } from "vitest/config"

/**
 * `npm run test:mutation` (Stryker, stryker.config.json) runs only the tests that exercise the mutated
 * files quickly: the ledger and idempotency rulebooks and their row checkers, and the store port
 * (whose inline runner executes the mutated bodies in this process).
 */
const mutation = process.env["STRYKER"] === "1"
const mutationTests = [
  "test/spec/ledger.test.ts",
  "test/spec/ledgerRows.test.ts",
  "test/spec/idempotency.test.ts",
  "test/store/ChatStore.test.ts",
  "test/store/portInline.test.ts"
]

export default defineConfig({
  test: {
    include: mutation ? mutationTests : ["test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: "forks"
  }
})
