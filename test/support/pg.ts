/**
 * PostgreSQL for the tests: `TOLLGATE_TEST_STORE=pg` runs the end-to-end suite (and the store tests
 * that honour it) on PostgreSQL instead of SQLite; every store gets a fresh schema of the test
 * database (`TOLLGATE_TEST_PG_URL`, default the loopback server of scripts/services.sh), so runs and
 * files never see each other's rows; the schema is dropped when the store closes.
 *
 * `pgQuerySync` reads synchronously (through `psql`), so the suite's read-only assertions
 * (test/e2e/helpers.ts) stay the same lines on both engines.
 */
import { execFileSync } from "node:child_process"
import { randomBytes } from "node:crypto"

export const TEST_PG_URL = process.env.TOLLGATE_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test"

export const TEST_REDIS_URL = process.env.TOLLGATE_TEST_REDIS_URL ?? "redis://127.0.0.1:6379"

/** Whether the suite runs on PostgreSQL (TOLLGATE_TEST_STORE=pg). */
export const testOnPostgres = process.env.TOLLGATE_TEST_STORE === "pg"

const psql = (url: string, sql: string): string =>
  execFileSync("psql", [url, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] })

/** Whether the test server answers (a clear skip message instead of a connection error). */
export const pgReachable = (url = TEST_PG_URL): boolean => {
  try {
    return psql(url, "SELECT 1").trim() === "1"
  } catch {
    return false
  }
}

/** Whether the test Redis answers PING. */
export const redisReachable = (url = TEST_REDIS_URL): boolean => {
  try {
    return execFileSync("redis-cli", ["-u", url, "PING"], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }).trim() === "PONG"
  } catch {
    return false
  }
}

/**
 * The one gate of the suites on the real engines: whether `suite` runs. It runs when the engines it
 * needs answer, and always under CI (CI=true), where an unreachable engine must fail, not skip;
 * otherwise it is skipped with one line on stderr saying why. Use as `describe.runIf(onEngines(…))`.
 */
export const onEngines = (suite: string, needs: { readonly pg?: boolean; readonly redis?: boolean } = { pg: true }): boolean => {
  if (process.env.CI !== undefined) return true
  const missing = [needs.pg === true && !pgReachable() ? "PostgreSQL" : undefined, needs.redis === true && !redisReachable() ? "Redis" : undefined].filter(
    (x) => x !== undefined
  )
  if (missing.length === 0) return true
  console.warn(`${suite}: SKIPPED — ${missing.join(" and ")} not reachable (run scripts/services.sh; under CI=true this fails instead)`)
  return false
}

/** `url` with its connections' search_path set to `schema`. */
export const withSchema = (url: string, schema: string): string =>
  `${url}${url.includes("?") ? "&" : "?"}options=${encodeURIComponent(`-c search_path=${schema}`)}`

export interface TestSchema {
  readonly name: string
  /** DATABASE_URL of a store in this schema. */
  readonly url: string
  readonly drop: () => void
}

/** A fresh, empty schema of the test database. */
export const freshSchema = (base = TEST_PG_URL): TestSchema => {
  const name = `t_${Date.now().toString(36)}_${randomBytes(4).toString("hex")}`
  psql(base, `CREATE SCHEMA ${name}`)
  return { name, url: withSchema(base, name), drop: () => void psql(base, `DROP SCHEMA IF EXISTS ${name} CASCADE`) }
}

const literal = (v: unknown): string => {
  if (v === null || v === undefined) return "NULL"
  if (typeof v === "number" || typeof v === "bigint") return String(v)
  if (typeof v === "boolean") return v ? "TRUE" : "FALSE"
  return `'${String(v).replace(/'/g, "''")}'`
}

/** Rows of a read, synchronously; `?` placeholders as in SQLite. A BYTEA comes back as a Buffer. */
export const pgQuerySync = <T = Record<string, unknown>>(url: string, sql: string, params: ReadonlyArray<unknown> = []): Array<T> => {
  let i = 0
  const text = sql.replace(/\?/g, () => literal(params[i++]))
  const out = psql(url, `SELECT COALESCE(json_agg(t), '[]'::json) FROM (${text}) t`).trim()
  return (JSON.parse(out) as Array<Record<string, unknown>>).map(
    (row) =>
      Object.fromEntries(
        Object.entries(row).map(([k, v]) => [k, typeof v === "string" && /^\\x([0-9a-f]{2})*$/.test(v) ? Buffer.from(v.slice(2), "hex") : v])
      ) as T
  )
}
