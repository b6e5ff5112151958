import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"
import { onEngines } from "./test/support/pg.ts"

/**
 * `npm run test:mutation` (Stryker, stryker.config.json) runs only the tests that exercise the mutated
 * files quickly: the ledger, idempotency and epoch rulebooks and the ledger's row checkers, and the store port
 * (whose inline runner executes the mutated bodies in this process).
 */
const mutation = process.env["STRYKER"] === "1"
const mutationTests = [
  "test/spec/ledger.test.ts",
  "test/spec/ledgerRows.test.ts",
  "test/spec/idempotency.test.ts",
  "test/spec/epochs.test.ts",
  "test/store/ChatStore.test.ts",
  "test/store/portInline.test.ts"
]

/**
 * Two projects in `npm test`: every test on the embedded default (SQLite, the limiter in process),
 * and the end-to-end suite again on PostgreSQL with the rate limit shared through Redis (the store
 * and limiter several instances run) — a project only when both engines answer, and always under
 * CI=true, where an unreachable engine fails instead (test/support/pg.ts `onEngines`).
 */
const e2eOnPg = !mutation && onEngines("vitest project e2e-pg (test/e2e on PostgreSQL + Redis)", { pg: true, redis: true })

export default defineConfig({
  // The dashboard's sources import the rulebook as the package @tollgate/spec, which its Vite build
  // resolves to the package's browser build (dashboard/vite.config.ts); the tests resolve it the same way.
  resolve: { alias: { "@tollgate/spec": fileURLToPath(new URL("./spec/dist/web/index.js", import.meta.url)) } },
  test: {
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: "forks",
    projects: [
      {
        extends: true,
        test: {
          name: "default",
          include: mutation ? mutationTests : ["test/**/*.test.ts"],
          env: { TOLLGATE_TEST_STORE: "sqlite", TOLLGATE_TEST_REDIS: "0" }
        }
      },
      ...(e2eOnPg
        ? [
            {
              extends: true as const,
              test: {
                name: "e2e-pg",
                include: ["test/e2e/**/*.test.ts"],
                env: { TOLLGATE_TEST_STORE: "pg", TOLLGATE_TEST_REDIS: "1" }
              }
            }
          ]
        : [])
    ]
  }
})
