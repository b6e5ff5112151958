/**
 * Layer composition: settings → store and HTTP client → services → HTTP server.
 * `main.ts` launches `ServerLive`; tests build the same graph with their own Settings.
 */
import * as OtlpSerialization from "@effect/opentelemetry/OtlpSerialization"
import * as OtlpTracer from "@effect/opentelemetry/OtlpTracer"
import { HttpServer } from "@effect/platform"
import { NodeHttpClient, NodeHttpServer } from "@effect/platform-node"
import { Clock, Duration, Effect, Layer, Logger, Option } from "effect"
import { createServer, type Server } from "node:http"
import { Settings } from "./domain/config.ts"
import { makeApp } from "./http/app.ts"
import { answerClientError } from "./http/errors.ts"
import { makeRequestListener } from "./http/fast.ts"
import { Bootstrap } from "./services/Bootstrap.ts"
import { Gateway } from "./services/Gateway.ts"
import { IdempotencyStore } from "./services/IdempotencyStore.ts"
import { Instance } from "./services/Instance.ts"
import { KeyRegistry } from "./services/KeyRegistry.ts"
import { Ledger } from "./services/Ledger.ts"
import { Metrics } from "./services/Metrics.ts"
import { Pricing } from "./services/Pricing.ts"
import { Projects } from "./services/Projects.ts"
import { RateLimiterLive } from "./services/RateLimiter.ts"
import { ReceiptLog } from "./services/ReceiptLog.ts"
import { ReceiptKeyLive, ReceiptSigner } from "./services/ReceiptSigner.ts"
import { Recovery } from "./services/Recovery.ts"
import { Requests } from "./services/Requests.ts"
import { Router } from "./services/Router.ts"
import { Activity } from "./services/Activity.ts"
import { AuthThrottle } from "./services/AuthThrottle.ts"
import { Sessions } from "./services/Sessions.ts"
import { Events } from "./services/Events.ts"
import { Webhooks } from "./services/Webhooks.ts"
import { WebhookSecrets, WebhookSettingsLive } from "./services/WebhookSecrets.ts"
import { WebhookWorker } from "./services/WebhookWorker.ts"
import { ScopeBudgets } from "./services/ScopeBudgets.ts"
import { ChatStoreLive } from "./store/chatStoreLive.ts"
import { StoreDatabaseLive } from "./store/Database.ts"

/** Every governance service, over the store and the upstream HTTP client. Requires Settings. */
export const ServicesLive = Layer.mergeAll(Sessions.Default, Activity.Default, Webhooks.Default, WebhookWorker.Default, ScopeBudgets.Default).pipe(
  Layer.provideMerge(Layer.mergeAll(Gateway.Default, Bootstrap.Default, Recovery.Default, AuthThrottle.Default, ReceiptLog.Default)),
  // Events below the Gateway: a store refusal writes its budget.exhausted before the 402 (src/services/Events.ts).
  Layer.provideMerge(Layer.mergeAll(KeyRegistry.Default, Ledger.Default, ChatStoreLive.pipe(Layer.provide(ReceiptKeyLive)), Instance.Default, Events.Default)),
  Layer.provideMerge(
    Layer.mergeAll(Projects.Default, RateLimiterLive, IdempotencyStore.Default, Pricing.Default, ReceiptSigner.Default, Requests.Default, Router.DefaultWithoutDependencies)
  ),
  Layer.provideMerge(Layer.mergeAll(Metrics.Default, WebhookSecrets.Default.pipe(Layer.provideMerge(WebhookSettingsLive)))),
  Layer.provideMerge(StoreDatabaseLive)
)

/**
 * The Node HTTP server on Settings.port/host, with one 'request' listener: the governed endpoints on
 * the raw fast path (src/http/fast.ts), everything else on the Effect `app`. The listener is installed
 * before the server listens; `HttpServer.HttpServer` (its address) is the platform's, over the same server.
 */
export const HttpLive = Layer.unwrapEffect(
  Effect.map(Settings, (s) => {
    const server = createServer({
      // Slowloris bounds: the head within headersTimeout, the whole request within requestTimeout,
      // checked every second (node's default check runs every 30 s).
      headersTimeout: s.headersTimeoutMs,
      requestTimeout: s.requestTimeoutMs,
      keepAliveTimeout: s.keepAliveTimeoutMs,
      connectionsCheckingInterval: Math.min(1000, s.headersTimeoutMs)
    })
    server.on("clientError", answerClientError)
    const serve = Layer.scopedDiscard(
      Effect.gen(function* () {
        const listener = yield* makeRequestListener(yield* makeApp)
        server.on("request", listener)
        yield* Effect.addFinalizer(() => Effect.sync(() => server.off("request", listener)))
      })
    )
    return gracefulShutdown(server, s.shutdownGraceMs).pipe(
      Layer.provideMerge(NodeHttpServer.layer(() => server, { port: s.port, host: s.host }).pipe(Layer.provideMerge(serve)))
    )
  })
)

/**
 * Graceful shutdown (SIGTERM, SIGINT; its finalizer runs before the server's and the services'):
 * stop accepting connections, let the calls in flight finish for up to `graceMs`
 * (TOLLGATE_SHUTDOWN_GRACE_MS), then end those still running — a non-streamed call voided, a stream
 * charged for what it delivered (Gateway.stopCalls) — and close every connection. Nothing stays
 * reserved or pending: what a call still held is resolved before the store closes, and the epoch is
 * marked stopped (src/services/Instance.ts).
 */
const gracefulShutdown = (server: Server, graceMs: number) =>
  Layer.scopedDiscard(
    Effect.gen(function* () {
      const gateway = yield* Gateway
      yield* Effect.addFinalizer(() =>
        Effect.gen(function* () {
          yield* Effect.sync(() => server.close())
          const start = yield* Clock.currentTimeMillis
          yield* Effect.logInfo(`shutdown: no new connections; ${yield* gateway.inFlight} call(s) in flight, ${graceMs} ms to finish`)
          for (;;) {
            server.closeIdleConnections()
            const busy = yield* gateway.inFlight
            if (busy === 0) break
            if ((yield* Clock.currentTimeMillis) - start >= graceMs) {
              yield* Effect.logWarning(`shutdown: ${busy} call(s) still in flight after ${graceMs} ms; ending them (streams charged for what they delivered, other calls voided)`)
              yield* gateway.stopCalls
              break
            }
            yield* Effect.sleep(Duration.millis(20))
          }
          // Let the last replies leave, then drop whatever connection is left.
          yield* Effect.sleep(Duration.millis(50))
          yield* Effect.sync(() => server.closeAllConnections())
          yield* Effect.logInfo(`shutdown: calls in flight resolved after ${(yield* Clock.currentTimeMillis) - start} ms`)
        })
      )
    })
  )

/** Prints, once, what a new user needs to make a first call. Secrets here are shown once and never logged. */
const Welcome = Layer.effectDiscard(
  Effect.gen(function* () {
    const bootstrap = yield* Bootstrap
    const server = yield* HttpServer.HttpServer
    const address = server.address._tag === "TcpAddress" ? `http://localhost:${server.address.port}` : "the configured socket"
    const first = bootstrap.firstStart
    const lines = [`Tollgate is listening on ${address} (OpenAI base URL: ${address}/v1)`]
    if (first !== undefined) {
      lines.push(
        "",
        "First start: created the default project and a development key. They are shown ONCE; store them now.",
        `  project:         ${first.projectId}`,
        `  development key: ${first.developmentKey}`
      )
      if (first.adminToken !== undefined) lines.push(`  admin token:     ${first.adminToken}   (or set TOLLGATE_ADMIN_TOKEN)`)
    }
    yield* Effect.sync(() => process.stdout.write(lines.join("\n") + "\n"))
  })
)

/**
 * Traces: with an OTLP endpoint configured (OTEL_EXPORTER_OTLP_ENDPOINT), the governed call's spans
 * (`tollgate.governed_call` → reserve, upstream, settle or abandon; src/services/Gateway.ts) and the
 * SQL and HTTP client spans under them are exported as OTLP/HTTP JSON, in batches, by a tracer on its
 * own undici client. Without one, spans are off: Effect's default tracer would still build a span per
 * request, per SQL statement and per upstream call (and inject trace headers upstream), a measurable
 * share of the chat path's CPU (docs/decisions/).
 */
export const TracingLive = Layer.unwrapEffect(
  Effect.map(Settings, (s) =>
    Option.match(s.otlpTracesUrl, {
      onNone: () => Layer.setTracerEnabled(false),
      onSome: (url) =>
        OtlpTracer.layer({ url, resource: { serviceName: "tollgate" } }).pipe(
          Layer.provide(OtlpSerialization.layerJson),
          Layer.provide(NodeHttpClient.layerUndici)
        )
    })
  )
)

/** The whole gateway: services, the app served over HTTP, the welcome banner. Requires Settings. */
export const ServerLive = Welcome.pipe(
  Layer.provideMerge(HttpLive),
  Layer.provideMerge(ServicesLive),
  Layer.provide(Logger.json),
  Layer.provide(TracingLive)
)
