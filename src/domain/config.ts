/**
 * The gateway's configuration: environment variables (docs/contract.md §8, a contract) and the JSON file
 * named by TOLLGATE_CONFIG (providers, routes, rate cards). Loaded once at start-up.
 */
import { Config, ConfigError, Context, Effect, Layer, Option, Redacted, Schema } from "effect"
import { isIP } from "node:net"
import { hostname } from "node:os"
import { readFileSync } from "node:fs"
import { DEFAULT_TTL_MILLIS, MIN_TTL_MILLIS } from "../../spec/idempotency.ts"
import { isSupportedDatabaseUrl } from "./databaseUrl.ts"
import { MAX_REQUESTS_PER_MINUTE, MAX_TOKENS_PER_MINUTE } from "./adminFields.ts"

export const ProviderConfig = Schema.Union(
  Schema.Struct({
    type: Schema.Literal("openai"),
    base_url: Schema.String,
    api_key_env: Schema.optional(Schema.String),
    timeout_ms: Schema.optional(Schema.Int)
  }),
  Schema.Struct({
    type: Schema.Literal("anthropic"),
    base_url: Schema.optional(Schema.String),
    api_key_env: Schema.optional(Schema.String),
    timeout_ms: Schema.optional(Schema.Int)
  }),
  Schema.Struct({
    type: Schema.Literal("demo"),
    /** Artificial latency, for demos and benchmarks. */
    delay_ms: Schema.optional(Schema.Int)
  })
)
export type ProviderConfig = typeof ProviderConfig.Type

export const RouteConfig = Schema.Struct({
  name: Schema.String.pipe(Schema.minLength(1)),
  provider: Schema.String,
  upstream_model: Schema.String,
  max_output_tokens: Schema.optionalWith(Schema.Int.pipe(Schema.positive()), { default: () => 4096 }),
  auto: Schema.optionalWith(Schema.Boolean, { default: () => false }),
  /** Projects allowed to use the route; absent = every project. */
  projects: Schema.optional(Schema.Array(Schema.String)),
  /**
   * The provider's quota for this route, kept by every instance together (issue 41 item 3): calls
   * refused by it fall back to the next `auto` route; a call pinned to it gets a 429.
   */
  rate_limit: Schema.optional(
    Schema.Struct({
      requests_per_minute: Schema.optional(Schema.Int.pipe(Schema.between(1, MAX_REQUESTS_PER_MINUTE))),
      tokens_per_minute: Schema.optional(Schema.Int.pipe(Schema.between(1, MAX_TOKENS_PER_MINUTE)))
    })
  )
})
export type RouteConfig = typeof RouteConfig.Type

const Price = Schema.Int.pipe(Schema.nonNegative())
export const PricesConfig = Schema.Struct({
  input: Price,
  cached_input: Schema.optional(Price),
  output: Price,
  reasoning: Schema.optional(Price)
})

export const RateCardConfig = Schema.Struct({
  version: Schema.String.pipe(Schema.pattern(/^rc_[A-Za-z0-9._-]+$/)),
  effective_from: Schema.String.pipe(Schema.filter((s) => !Number.isNaN(Date.parse(s)), { message: () => "an ISO-8601 instant" })),
  prices: Schema.Record({ key: Schema.String, value: PricesConfig })
})
export type RateCardConfig = typeof RateCardConfig.Type

export const GatewayFile = Schema.Struct({
  providers: Schema.Record({ key: Schema.String, value: ProviderConfig }),
  routes: Schema.Array(RouteConfig),
  rate_cards: Schema.Array(RateCardConfig),
  /** Defaults for the project created on first start. */
  default_project: Schema.optional(
    Schema.Struct({
      budget_credits: Schema.optional(Schema.Int),
      requests_per_minute: Schema.optional(Schema.Int),
      burst: Schema.optional(Schema.Int)
    })
  )
})
export type GatewayFile = typeof GatewayFile.Type

/** What `npm start` serves with no configuration at all: the built-in demo provider, no network. */
export const defaultGatewayFile: GatewayFile = {
  providers: { demo: { type: "demo" } },
  routes: [{ name: "demo", provider: "demo", upstream_model: "tollgate-demo-1", max_output_tokens: 1024, auto: true }],
  rate_cards: [{ version: "rc_2026-01", effective_from: "2026-01-01T00:00:00Z", prices: { demo: { input: 100, output: 400 } } }]
}

export interface GatewaySettings {
  readonly port: number
  readonly host: string
  readonly databaseUrl: string
  readonly adminToken: Option.Option<Redacted.Redacted<string>>
  readonly maxBodyBytes: number
  /** Deepest nesting of arrays and objects a JSON body may have (400 deeper): bounds every recursive walk of it. */
  readonly maxJsonDepth: number
  /** node:http timeouts: the request head, the whole request (head and body), an idle keep-alive connection. */
  readonly headersTimeoutMs: number
  readonly requestTimeoutMs: number
  readonly keepAliveTimeoutMs: number
  /**
   * Peers whose X-Forwarded-For and X-Forwarded-Proto are believed (TOLLGATE_TRUSTED_PROXIES: IP
   * addresses and CIDR blocks; default loopback): the client's address for the sign-in throttle and
   * the session cookie's Secure flag (src/http/session.ts `clientOf`). Any other peer is the client.
   */
  readonly trustedProxies: ReadonlyArray<string>
  /** Bearer token of GET /metrics (the admin token is accepted too); with neither set, /metrics answers 401. */
  readonly metricsToken: Option.Option<Redacted.Redacted<string>>
  /** How long a duplicate waits for an in-flight original before answering 409. */
  readonly inflightWaitMs: number
  /** Per-attempt upstream timeout (headers / first byte) and total deadline for retries + fallback. */
  readonly upstreamTimeoutMs: number
  readonly upstreamDeadlineMs: number
  readonly upstreamRetries: number
  /**
   * How far ahead a hold's and an idempotency claim's deadline is set; a call in flight pushes it out
   * every third of it (heartbeat), so only a hold whose process died or hung reaches it and is voided
   * by the recovery sweep. Must outlive the upstream deadline (`upstreamCallBoundMs`), checked at start.
   */
  readonly reservationTtlMs: number
  /**
   * How often this process proves it is alive (its `instances` row) and writes the progress mark of
   * its open streams (the output delivered so far, charged if the process dies mid-stream).
   */
  readonly heartbeatMs: number
  /**
   * This process's stable name among the instances sharing a store: on start it resolves the holds
   * and claims its own previous epochs left (docs/contract.md §4). Defaults to the host name.
   */
  readonly instanceId: string
  /** On SIGTERM: how long calls in flight may run before they are settled or voided and the process exits. */
  readonly shutdownGraceMs: number
  /** Idempotency records live at least this long (docs/contract.md §5: ≥ 24 h). */
  readonly idempotencyTtlMs: number
  /** How long an authenticated key stays cached; bounds how fast a revocation on another instance takes effect. */
  readonly keyCacheTtlMs: number
  readonly receiptKeyFile: Option.Option<string>
  /** Circuit breaker: consecutive failures that open a route, and how long it stays open before a probe. */
  readonly breakerFailures: number
  readonly breakerOpenMs: number
  /** One JSON log line per request (method, endpoint, status, duration, request id, key id — never a secret). */
  readonly accessLog: boolean
  /**
   * Run the governed call's write transactions on a worker thread that owns a second connection to the
   * SQLite file (src/store/storeWorker.ts), off the event loop. An in-memory store always runs them inline.
   */
  readonly storeWorker: boolean
  /** REDIS_URL: the rate limit shared by every instance (src/services/RateLimiter.ts); none: this instance's own. */
  readonly redisUrl: Option.Option<Redacted.Redacted<string>>
  /** PostgreSQL only: connections in this instance's pool (TOLLGATE_PG_POOL_SIZE). */
  readonly pgPoolSize: number
  /**
   * PostgreSQL only: how long a statement waits for a connection of the pool, and a transaction retries
   * a refused or dropped one, before the call answers 503 store_unavailable (TOLLGATE_PG_ACQUIRE_TIMEOUT_MS).
   */
  readonly pgAcquireTimeoutMs: number
  /**
   * PostgreSQL only (issue 40, item 3; docs/decisions/0046, 0051): the longest a reservation waits for its
   * lane's turn beyond the database's own time for a statement (TOLLGATE_PG_MAX_WAIT_MS; that time is the
   * fastest of the lane's last statements, so a slow database still gets a batch a statement), a
   * reservation statement waits for a hot row's lock
   * (TOLLGATE_PG_LOCK_TIMEOUT_MS), and how many reservations may wait on a lane
   * (TOLLGATE_PG_MAX_QUEUED); past any of them the call answers 503 server_overloaded, nothing held.
   */
  readonly pgMaxWaitMs: number
  readonly pgLockTimeoutMs: number
  readonly pgMaxQueued: number
  /**
   * PostgreSQL only: the lanes of an instance (TOLLGATE_PG_LANES): each project's reservations and
   * settlements go through one of them, one statement at a time, the calls that arrive meanwhile in
   * its next batch. Fewer lanes, bigger batches: one by default (docs/decisions/0046 — on 8 projects one
   * lane halved PostgreSQL's commits and CPU a call against four, with one instance and with two).
   */
  readonly pgLanes: number
  /** How long a dashboard sign-in lasts (absolute, from sign-in). */
  readonly sessionTtlMs: number
  /**
   * Assertion mode (TOLLGATE_ASSERT=1): after each settlement and abandonment the store checks the
   * project's window against the rulebook (spec/ledger.ts `checkWindow`) inside the transaction, and
   * a violation fails it loudly (rolled back, a 500, an error in the log). For tests and canaries.
   */
  readonly assertInvariants: boolean
  readonly gateway: GatewayFile
  /**
   * Where OpenTelemetry traces of the governed call go (OTLP over HTTP, JSON); none: tracing off.
   * From OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_EXPORTER_OTLP_ENDPOINT + "/v1/traces", as the
   * OpenTelemetry SDKs read them.
   */
  readonly otlpTracesUrl: Option.Option<string>
}

export class Settings extends Context.Tag("tollgate/Settings")<Settings, GatewaySettings>() {}

export const loadGatewayFile = (path: string): Effect.Effect<GatewayFile, Error> =>
  Effect.try({
    try: () => JSON.parse(readFileSync(path, "utf8")) as unknown,
    catch: (e) => new Error(`TOLLGATE_CONFIG ${path}: ${(e as Error).message}`)
  }).pipe(
    Effect.flatMap((raw) => Schema.decodeUnknown(GatewayFile)(raw)),
    Effect.mapError((e) => new Error(`TOLLGATE_CONFIG ${path}: ${e.message}`))
  )

/** Cross-checks the config file: every route names a known provider and is priced by every card. */
export const validateGatewayFile = (file: GatewayFile): Effect.Effect<GatewayFile, Error> => {
  const problems: Array<string> = []
  const names = new Set<string>()
  for (const r of file.routes) {
    if (r.name === "auto") problems.push(`route name "auto" is reserved`)
    if (names.has(r.name)) problems.push(`route "${r.name}" is defined twice`)
    names.add(r.name)
    if (!(r.provider in file.providers)) problems.push(`route "${r.name}" names unknown provider "${r.provider}"`)
    for (const card of file.rate_cards) {
      if (!(r.name in card.prices)) problems.push(`rate card ${card.version} has no prices for route "${r.name}"`)
    }
  }
  if (file.rate_cards.length === 0) problems.push("at least one rate card is required")
  return problems.length === 0 ? Effect.succeed(file) : Effect.fail(new Error(`invalid gateway config: ${problems.join("; ")}`))
}

/**
 * The default trusted proxies: loopback only. A loopback peer is a process on this host (inside the
 * boundary that already holds the database and the admin token), where a TLS-terminating proxy
 * usually runs; no remote peer can forge a forwarded address or scheme.
 */
const LOOPBACK: ReadonlyArray<string> = ["127.0.0.0/8", "::1"]

/** An IP address, or a CIDR block (`10.0.0.0/8`, `fd00::/8`). */
const isAddressOrBlock = (entry: string): boolean => {
  const [ip = "", bits, ...more] = entry.split("/")
  const family = isIP(ip)
  return family !== 0 && more.length === 0 && (bits === undefined || (/^\d{1,3}$/.test(bits) && Number(bits) <= (family === 4 ? 32 : 128)))
}

const settingsConfig = Config.all({
  port: Config.integer("PORT").pipe(Config.withDefault(8080)),
  host: Config.string("HOST").pipe(Config.withDefault("0.0.0.0")),
  // Refused here, as a configuration error, rather than as a defect when the store opens.
  databaseUrl: Config.string("DATABASE_URL").pipe(
    Config.validate({
      message: "must be sqlite:<path> or postgres://user@host:port/database",
      validation: isSupportedDatabaseUrl
    }),
    Config.withDefault("sqlite:./data/tollgate.db")
  ),
  adminToken: Config.option(Config.redacted("TOLLGATE_ADMIN_TOKEN")),
  maxBodyBytes: Config.integer("TOLLGATE_MAX_BODY_BYTES").pipe(Config.withDefault(8 * 1024 * 1024)),
  maxJsonDepth: Config.integer("TOLLGATE_MAX_JSON_DEPTH").pipe(Config.withDefault(64)),
  headersTimeoutMs: Config.integer("TOLLGATE_HEADERS_TIMEOUT_MS").pipe(Config.withDefault(10_000)),
  requestTimeoutMs: Config.integer("TOLLGATE_REQUEST_TIMEOUT_MS").pipe(Config.withDefault(30_000)),
  keepAliveTimeoutMs: Config.integer("TOLLGATE_KEEP_ALIVE_TIMEOUT_MS").pipe(Config.withDefault(5_000)),
  trustedProxies: Config.string("TOLLGATE_TRUSTED_PROXIES").pipe(
    Config.map((s) => s.split(",").map((p) => p.trim()).filter((p) => p !== "")),
    Config.validate({ message: "must be IP addresses or CIDR blocks, comma-separated (127.0.0.1,10.0.0.0/8,::1), or empty for none", validation: (l) => l.every(isAddressOrBlock) }),
    Config.withDefault(LOOPBACK)
  ),
  metricsToken: Config.option(Config.redacted("TOLLGATE_METRICS_TOKEN")),
  inflightWaitMs: Config.integer("TOLLGATE_INFLIGHT_WAIT_MS").pipe(Config.withDefault(60_000)),
  upstreamTimeoutMs: Config.integer("TOLLGATE_UPSTREAM_TIMEOUT_MS").pipe(Config.withDefault(60_000)),
  upstreamDeadlineMs: Config.integer("TOLLGATE_UPSTREAM_DEADLINE_MS").pipe(Config.withDefault(120_000)),
  upstreamRetries: Config.integer("TOLLGATE_UPSTREAM_RETRIES").pipe(Config.withDefault(1)),
  reservationTtlMs: Config.integer("TOLLGATE_RESERVATION_TTL_MS").pipe(Config.withDefault(15 * 60_000)),
  heartbeatMs: Config.integer("TOLLGATE_HEARTBEAT_MS").pipe(
    Config.validate({ message: "must be between 50 and 60000 (milliseconds)", validation: (n) => n >= 50 && n <= 60_000 }),
    Config.withDefault(1000)
  ),
  instanceId: Config.string("TOLLGATE_INSTANCE_ID").pipe(
    Config.validate({ message: "must be 1–128 printable ASCII characters", validation: (s) => /^[\x21-\x7e]{1,128}$/.test(s) }),
    Config.withDefault(hostname() || "tollgate")
  ),
  shutdownGraceMs: Config.integer("TOLLGATE_SHUTDOWN_GRACE_MS").pipe(
    Config.validate({ message: "must be ≥ 0 (milliseconds)", validation: (n) => n >= 0 }),
    Config.withDefault(10_000)
  ),
  idempotencyTtlMs: Config.integer("TOLLGATE_IDEMPOTENCY_TTL_MS").pipe(Config.withDefault(DEFAULT_TTL_MILLIS)),
  keyCacheTtlMs: Config.integer("TOLLGATE_KEY_CACHE_TTL_MS").pipe(Config.withDefault(1000)),
  receiptKeyFile: Config.option(Config.string("TOLLGATE_RECEIPT_KEY_FILE")),
  breakerFailures: Config.integer("TOLLGATE_BREAKER_FAILURES").pipe(Config.withDefault(3)),
  breakerOpenMs: Config.integer("TOLLGATE_BREAKER_OPEN_MS").pipe(Config.withDefault(30_000)),
  accessLog: Config.boolean("TOLLGATE_ACCESS_LOG").pipe(Config.withDefault(true)),
  storeWorker: Config.boolean("TOLLGATE_STORE_WORKER").pipe(Config.withDefault(true)),
  redisUrl: Config.option(Config.redacted("REDIS_URL")),
  pgPoolSize: Config.integer("TOLLGATE_PG_POOL_SIZE").pipe(
    Config.validate({ message: "must be between 1 and 1000", validation: (n) => n >= 1 && n <= 1000 }),
    Config.withDefault(10)
  ),
  pgAcquireTimeoutMs: Config.integer("TOLLGATE_PG_ACQUIRE_TIMEOUT_MS").pipe(
    Config.validate({ message: "must be between 100 and 60000", validation: (n) => n >= 100 && n <= 60_000 }),
    Config.withDefault(5000)
  ),
  pgMaxWaitMs: Config.integer("TOLLGATE_PG_MAX_WAIT_MS").pipe(
    Config.validate({ message: "must be between 1 and 60000", validation: (n) => n >= 1 && n <= 60_000 }),
    Config.withDefault(1000)
  ),
  pgLockTimeoutMs: Config.integer("TOLLGATE_PG_LOCK_TIMEOUT_MS").pipe(
    Config.validate({ message: "must be between 1 and 60000", validation: (n) => n >= 1 && n <= 60_000 }),
    Config.withDefault(1000)
  ),
  pgMaxQueued: Config.integer("TOLLGATE_PG_MAX_QUEUED").pipe(
    Config.validate({ message: "must be between 1 and 100000", validation: (n) => n >= 1 && n <= 100_000 }),
    Config.withDefault(512)
  ),
  pgLanes: Config.integer("TOLLGATE_PG_LANES").pipe(
    Config.validate({ message: "must be between 1 and 64", validation: (n) => n >= 1 && n <= 64 }),
    Config.withDefault(1)
  ),
  sessionTtlMs: Config.map(Config.integer("TOLLGATE_SESSION_TTL_SECONDS").pipe(Config.withDefault(8 * 3600)), (s) => s * 1000),
  assertInvariants: Config.boolean("TOLLGATE_ASSERT").pipe(Config.withDefault(false)),
  otlpTracesUrl: Config.all([
    Config.option(Config.string("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")),
    Config.option(Config.string("OTEL_EXPORTER_OTLP_ENDPOINT"))
  ]).pipe(
    Config.map(([traces, base]) =>
      Option.orElse(Option.filter(traces, (u) => u !== ""), () => Option.map(Option.filter(base, (u) => u !== ""), (u) => `${u.replace(/\/+$/, "")}/v1/traces`))
    )
  ),
  configPath: Config.option(Config.string("TOLLGATE_CONFIG"))
})

/** The backoff the Router sleeps between two attempts of a route, at most (src/services/Router.ts). */
const MAX_BACKOFF_MS = 2_000 + 50

/**
 * The longest a non-streamed upstream call can run, retries and fallback included, by the
 * configuration: the Router starts no attempt after `upstreamDeadlineMs`, and one attempt lasts at
 * most its provider's timeout (`timeout_ms`, else TOLLGATE_UPSTREAM_TIMEOUT_MS; a demo provider its
 * `delay_ms`); nor can more than (1 + retries) attempts per route, each followed by a backoff, run.
 * A stream has no such bound: its heartbeat keeps its hold alive however long it runs.
 */
export const upstreamCallBoundMs = (s: Pick<GatewaySettings, "upstreamDeadlineMs" | "upstreamTimeoutMs" | "upstreamRetries" | "gateway">): number => {
  const timeouts = Object.values(s.gateway.providers).map((p) => (p.type === "demo" ? (p.delay_ms ?? 0) : (p.timeout_ms ?? s.upstreamTimeoutMs)))
  const longestAttempt = Math.max(0, ...timeouts)
  const attempts = (1 + Math.max(0, s.upstreamRetries)) * Math.max(1, s.gateway.routes.length)
  return Math.min(s.upstreamDeadlineMs + longestAttempt, attempts * (longestAttempt + MAX_BACKOFF_MS))
}

/**
 * A hold and its idempotency claim must outlive the call they cover even if its heartbeat stalls:
 * a TTL shorter than the upstream bound would let the recovery sweep void a live call's hold and
 * free its key, and a retry would run (and be charged) again (issue 19, finding 3). Refused at start.
 */
export const checkReservationTtl = (s: GatewaySettings): Effect.Effect<GatewaySettings, ConfigError.ConfigError> => {
  const bound = upstreamCallBoundMs(s)
  return s.reservationTtlMs > bound
    ? Effect.succeed(s)
    : Effect.fail(
        ConfigError.InvalidData(
          ["TOLLGATE_RESERVATION_TTL_MS"],
          `is ${s.reservationTtlMs} ms, but an upstream call may run ${bound} ms (TOLLGATE_UPSTREAM_DEADLINE_MS ${s.upstreamDeadlineMs} + the longest attempt's timeout, or every attempt with its backoff); set it above ${bound}, or lower the upstream timeout or deadline`
        )
      )
}

/** Settings from the process environment (and the TOLLGATE_CONFIG file when set). */
export const SettingsFromEnv = Layer.effect(
  Settings,
  Effect.gen(function* () {
    const { configPath, ...rest } = yield* settingsConfig
    const file = Option.isSome(configPath) ? yield* loadGatewayFile(configPath.value) : defaultGatewayFile
    const gateway = yield* validateGatewayFile(file)
    return yield* checkReservationTtl({ ...rest, idempotencyTtlMs: Math.max(rest.idempotencyTtlMs, MIN_TTL_MILLIS), gateway })
  }).pipe(Effect.orDie)
)

/** Settings for tests and embedding: defaults overridden by `overrides`. */
export const makeSettings = (overrides: Partial<GatewaySettings> = {}): GatewaySettings => ({
  port: 0,
  host: "127.0.0.1",
  databaseUrl: "sqlite::memory:",
  adminToken: Option.none(),
  maxBodyBytes: 8 * 1024 * 1024,
  maxJsonDepth: 64,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  keepAliveTimeoutMs: 5_000,
  trustedProxies: LOOPBACK,
  metricsToken: Option.none(),
  inflightWaitMs: 10_000,
  upstreamTimeoutMs: 10_000,
  upstreamDeadlineMs: 20_000,
  upstreamRetries: 1,
  reservationTtlMs: 15 * 60_000,
  heartbeatMs: 1000,
  instanceId: "test",
  shutdownGraceMs: 10_000,
  idempotencyTtlMs: DEFAULT_TTL_MILLIS,
  keyCacheTtlMs: 1000,
  receiptKeyFile: Option.none(),
  breakerFailures: 3,
  breakerOpenMs: 30_000,
  accessLog: false,
  storeWorker: true,
  redisUrl: Option.none(),
  pgPoolSize: 10,
  pgAcquireTimeoutMs: 5000,
  pgMaxWaitMs: 1000,
  pgLockTimeoutMs: 1000,
  pgMaxQueued: 512,
  pgLanes: 1,
  sessionTtlMs: 8 * 3600 * 1000,
  assertInvariants: false,
  otlpTracesUrl: Option.none(),
  gateway: defaultGatewayFile,
  ...overrides
})
