/**
 * Start a real Tollgate in-process for end-to-end tests: the same layer graph as `npm start`
 * (HTTP server on a free loopback port, SQLite file in a fresh temp dir), with settings overridden.
 */
import { HttpServer } from "@effect/platform"
import Database from "better-sqlite3"
import { Effect, Option, Redacted } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { GatewayFile, GatewaySettings } from "../../src/domain/config.ts"
import { ServerLive } from "../../src/server.ts"
import { type MockUpstream, startMockUpstream } from "./mockUpstream.ts"
import { Bootstrap } from "../../src/services/Bootstrap.ts"
import { freshSchema, pgQuerySync, TEST_REDIS_URL, testOnPostgres, type TestSchema } from "./pg.ts"
import { testRuntime } from "./runtime.ts"

export const ADMIN_TOKEN = "test-admin-token"

export interface TestGateway {
  /** OpenAI base URL, ending in /v1. */
  readonly url: string
  readonly origin: string
  readonly devKey: string
  readonly projectId: string
  readonly adminToken: string
  readonly dbPath: string
  /** Which engine the store is: SQLite (a file in `dbPath`), or PostgreSQL (TOLLGATE_TEST_STORE=pg). */
  readonly engine: "sqlite" | "pg"
  /** DATABASE_URL of the store. */
  readonly databaseUrl: string
  /** A read-only handle on a SQLite store, for assertions (PostgreSQL: use `query`). */
  readonly db: () => Database.Database
  /** A read of the store, synchronous, on either engine (`?` placeholders), for assertions. */
  readonly query: <T = Record<string, unknown>>(sql: string, ...params: Array<unknown>) => Array<T>
  /** Admin API call with the admin token. */
  readonly admin: (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }>
  /** Shut the gateway down (its runtime's finalizers), keeping the store for assertions. */
  readonly shutdown: () => Promise<void>
  readonly close: () => Promise<void>
}

/** A gateway file with one OpenAI-compatible provider at `upstreamUrl` and the given routes. */
export const mockGatewayFile = (
  upstreamUrl: string,
  routes: GatewayFile["routes"] = [{ name: "gpt-test", provider: "mock", upstream_model: "mock-model", max_output_tokens: 256, auto: true }],
  prices: Record<string, { input: number; output: number; cached_input?: number; reasoning?: number }> = {}
): GatewayFile => ({
  providers: { mock: { type: "openai", base_url: upstreamUrl } },
  routes,
  rate_cards: [
    {
      version: "rc_2020-01",
      effective_from: "2020-01-01T00:00:00Z",
      prices: Object.fromEntries(routes.map((r) => [r.name, prices[r.name] ?? { input: 1000, output: 2000 }]))
    }
  ]
})

export const startGateway = async (
  gateway: GatewayFile,
  overrides: Partial<GatewaySettings> = {}
): Promise<TestGateway> => {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-test-"))
  const dbPath = join(dir, "tollgate.db")
  // PostgreSQL: a fresh schema per gateway, unless the test names a store (several instances on one).
  const schema: TestSchema | undefined = testOnPostgres && overrides.databaseUrl === undefined ? freshSchema() : undefined
  const databaseUrl = overrides.databaseUrl ?? schema?.url ?? `sqlite:${dbPath}`
  const engine = databaseUrl.startsWith("sqlite:") ? ("sqlite" as const) : ("pg" as const)
  const settings: Partial<GatewaySettings> = {
    // The end-to-end suite runs in assertion mode: every settlement and abandonment checks its window.
    assertInvariants: true,
    databaseUrl,
    receiptKeyFile: engine === "pg" ? Option.some(join(dir, "receipt-signing-key.pem")) : Option.none(),
    // TOLLGATE_TEST_REDIS=1: the rate limit shared through Redis (REDIS_URL), as several instances keep it.
    redisUrl: process.env.TOLLGATE_TEST_REDIS === "1" ? Option.some(Redacted.make(TEST_REDIS_URL)) : Option.none(),
    adminToken: Option.some(Redacted.make(ADMIN_TOKEN)),
    gateway,
    ...overrides
  }
  const runtime = testRuntime(ServerLive, settings)
  const { port, first } = await runtime.runPromise(
    Effect.gen(function* () {
      const server = yield* HttpServer.HttpServer
      const bootstrap = yield* Bootstrap
      const port = server.address._tag === "TcpAddress" ? server.address.port : 0
      // Undefined for a second instance on a store another one started first (test/webhooks/twoInstances.test.ts).
      return { port, first: bootstrap.firstStart }
    })
  )
  const origin = `http://127.0.0.1:${port}`
  const handles: Array<Database.Database> = []
  const db = () => {
    if (engine === "pg") throw new Error("db(): a SQLite handle; this gateway runs on PostgreSQL (use query)")
    const h = new Database(dbPath, { readonly: true })
    handles.push(h)
    return h
  }
  let reader: Database.Database | undefined
  return {
    url: `${origin}/v1`,
    origin,
    devKey: first?.developmentKey ?? "",
    projectId: first?.projectId ?? "",
    adminToken: ADMIN_TOKEN,
    dbPath,
    engine,
    databaseUrl,
    db,
    query: <T,>(sql: string, ...params: Array<unknown>): Array<T> => {
      if (engine === "pg") return pgQuerySync<T>(databaseUrl, sql, params)
      reader ??= db()
      return reader.prepare(sql).all(...params) as Array<T>
    },
    admin: async (method, path, body) => {
      const res = await fetch(`${origin}${path}`, {
        method,
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
        ...(body === undefined ? {} : { body: JSON.stringify(body) })
      })
      return { status: res.status, body: await res.json() }
    },
    shutdown: () => runtime.dispose(),
    close: async () => {
      for (const h of handles) h.close()
      await runtime.dispose()
      schema?.drop()
      rmSync(dir, { recursive: true, force: true })
    }
  }
}

/**
 * For a describe block: a real mock upstream and a gateway routed to it, started in beforeAll and
 * closed in afterAll. Read `.upstream` / `.gateway` inside tests (they exist once beforeAll ran).
 */
export const useMockedGateway = (
  hooks: { readonly beforeAll: (f: () => Promise<void>) => void; readonly afterAll: (f: () => Promise<void>) => void },
  file: (upstreamUrl: string) => GatewayFile = (url) => mockGatewayFile(url),
  overrides: Partial<GatewaySettings> = {}
) => {
  const handle = {} as { upstream: MockUpstream; gateway: TestGateway }
  hooks.beforeAll(async () => {
    handle.upstream = await startMockUpstream()
    handle.gateway = await startGateway(file(handle.upstream.url), overrides)
  })
  hooks.afterAll(async () => {
    await handle.gateway?.close()
    await handle.upstream?.close()
  })
  return handle
}
