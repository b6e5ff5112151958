/**
 * Bench child: the governed floor — what the same governance costs with no Effect pipeline around it.
 *
 * The bare proxy is the floor of a Node proxy; this is the floor of a governed one BUILT THE WAY
 * TOLLGATE IS: Tollgate's own store worker (src/store/storeWorker.mjs) runs Tollgate's own reserve and
 * settle transactions (claim, sized hold, pending request; charge, signed receipt, completion, stored
 * idempotent result) group-committed with synchronous=FULL (a plain reservation's COMMIT unsynced,
 * by Tollgate's own `mustSync`, as in Tollgate), and the event loop does the rest with
 * Tollgate's own pure parts (request fingerprint, token count, ids, pricing, governance rendering).
 * What it leaves out is the orchestration: no fibers, no services, no validation beyond what the
 * bench's requests need, one route, an in-memory token bucket, errors as bare 4xx/5xx. It answers one
 * question for issue 4: how close to the bare proxy can a gateway get that keeps these durability and
 * evidence guarantees on this machine? Tollgate's distance from this target is its pipeline's price;
 * this target's distance from the bare proxy is the price of the guarantees themselves.
 *
 * The database is prepared by Tollgate's own layers (migrations, bootstrap project and key, receipt
 * key), with the same gateway file as bench/targets/tollgate.ts. Prints `{"ready":true,"port":N,"key":…}`.
 * Not a product: it answers only POST /v1/chat/completions, streamed or not. `--inline` runs the same
 * transactions and group commit on the event loop instead of the worker (the latency floor without
 * the thread hand-offs).
 */
import BetterSqlite3 from "better-sqlite3"
import { Effect, Layer, ManagedRuntime, Option, Redacted } from "effect"
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { Worker } from "node:worker_threads"
import { Agent, request } from "undici"
import { chargeWithinReservation, settledCharge, type TokenCounts, tokensFromUsage, type UsageReport } from "../../spec/pricing.ts"
import { type GatewayFile, makeSettings, Settings } from "../../src/domain/config.ts"
import { newReceiptId, newRequestId, newReservationId } from "../../src/domain/ids.ts"
import { ServicesLive } from "../../src/server.ts"
import { Bootstrap } from "../../src/services/Bootstrap.ts"
import { verificationOf } from "../../src/services/Gateway.ts"
import { fingerprintOf } from "../../src/services/IdempotencyStore.ts"
import { KeyRegistry, type Principal } from "../../src/services/KeyRegistry.ts"
import { periodOf } from "../../src/services/Ledger.ts"
import { ReceiptSigner } from "../../src/services/ReceiptSigner.ts"
import { makeSseParser } from "../../src/providers/sse.ts"
import { chatCompletionsSurface } from "../../src/services/surfaces/chatCompletions.ts"
import { type Governance, withGovernance } from "../../src/services/surfaces/Surface.ts"
import { countChat } from "../../src/services/Tokenizer.ts"
import { makeChatTransactions, mustSync, type Reserved, type ReserveArgs, type SettleArgs } from "../../src/store/chatTransactions.ts"
import { fastestSealer, sodiumModule } from "../../src/store/sodium.ts"
import type { Call, FromWorker, StoreWorkerData, ToWorker } from "../../src/store/storeWorker.ts"
import { makeGroupCommit, type TxOutcome } from "../../src/store/syncTransactions.ts"
import { arg, flag } from "../lib/args.ts"
import { installProfilers } from "../lib/profilers.ts"

const upstream = (arg("--upstream") ?? "http://127.0.0.1:9100").replace(/\/+$/, "")
const model = arg("--model") ?? "gpt-4o-mini"
const dir = mkdtempSync(join(tmpdir(), "tollgate-floor-"))
const dbPath = join(dir, "tollgate.db")
const prices = { input: 150, cached_input: 75, output: 600 }
const gateway: GatewayFile = {
  providers: { mock: { type: "openai", base_url: `${upstream}/v1` } },
  routes: [{ name: model, provider: "mock", upstream_model: model, max_output_tokens: 4096, auto: true }],
  rate_cards: [{ version: "rc_2020-01", effective_from: "2020-01-01T00:00:00Z", prices: { [model]: prices } }],
  default_project: { budget_credits: 1_000_000_000_000_000, requests_per_minute: 60_000_000, burst: 1_000_000 }
}

// ---- Set-up by Tollgate itself: schema, project, key, receipt signing key. Idle afterwards. ----
const settings = makeSettings({
  databaseUrl: `sqlite:${dbPath}`,
  adminToken: Option.some(Redacted.make("bench-admin-token")),
  // The main connection stays idle: the transactions below go to this target's own worker.
  storeWorker: false,
  gateway
})
const runtime = ManagedRuntime.make(ServicesLive.pipe(Layer.provide(Layer.succeed(Settings, settings)), Layer.provide(Layer.setTracerEnabled(false))))
const setup = await runtime.runPromise(
  Effect.gen(function* () {
    const key = (yield* Bootstrap).firstStart!.developmentKey
    const principal = yield* (yield* KeyRegistry).authenticate(`Bearer ${key}`)
    const signer = yield* ReceiptSigner
    return { key, principal, signingKey: signer.signingKey, signingKeyId: signer.keyId }
  })
)
/** The key cache: the Authorization header → its principal (Tollgate's cache also revokes; this one need not). */
const principals = new Map<string, Principal>([[`Bearer ${setup.key}`, setup.principal]])

// ---- The store: Tollgate's own worker on the same file, or (`--inline`) the same transactions and
// group commit on the event loop, as TOLLGATE_STORE_WORKER=false runs them ----
/** `sync`: a stream's reservation, committed unsynced, put on disk while its upstream opens (as Tollgate's `store.sync`). */
type Run = (op: "reserve" | "settle" | "sync", args: ReserveArgs | SettleArgs | undefined, done: (outcome: TxOutcome) => void) => void
const inline = flag("--inline")
let closeStore: (then: () => void) => void
let run: Run
if (inline) {
  const db = new BetterSqlite3(dbPath, { timeout: 5000 })
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = FULL")
  db.pragma("foreign_keys = ON")
  const ops = makeChatTransactions(db, { keyId: setup.signingKeyId, seal: fastestSealer(setup.signingKey) })
  const group = makeGroupCommit(db)
  // Inline, a stream's reservation is synced by its own COMMIT (`mustSync`): nothing is left for `sync`.
  run = (op, args, done) =>
    op === "sync"
      ? done({ _tag: "Committed", value: undefined })
      : group.submit((abort) => (ops[op] as (a: unknown, abort: (e: unknown) => never) => unknown)(args, abort), done, mustSync(op, args))
  closeStore = (then) => group.submit(() => undefined, () => {
    db.close()
    then()
  })
} else {
  // Bundled by the bench (scripts/build.mjs), the worker sits beside this file; from the sources, in src/store.
  const bundled = new URL("./storeWorker.mjs", import.meta.url)
  const entry = existsSync(fileURLToPath(bundled)) ? bundled : new URL("../../src/store/storeWorker.mjs", import.meta.url)
  const worker = new Worker(entry, {
    workerData: { filename: dbPath, signingKey: setup.signingKey, signingKeyId: setup.signingKeyId, sodium: sodiumModule(), assertInvariants: false } satisfies StoreWorkerData,
    execArgv: []
  })
  await new Promise<void>((resolve, reject) => {
    worker.once("error", reject)
    worker.once("message", () => resolve())
  })
  const pending = new Map<number, (outcome: TxOutcome) => void>()
  worker.on("message", (m: FromWorker) => {
    if (m._tag !== "Done") return
    for (const { id, outcome } of m.replies) {
      pending.get(id)?.(outcome)
      pending.delete(id)
    }
  })
  let outbox: Array<Call> = []
  let nextId = 0
  run = (op, args, done) => {
    const id = nextId++
    pending.set(id, done)
    if (outbox.length === 0) {
      setImmediate(() => {
        const calls = outbox
        outbox = []
        worker.postMessage({ _tag: "Run", calls } satisfies ToWorker)
      })
    }
    outbox.push({ id, op, args })
  }
  closeStore = (then) => {
    worker.once("exit", then)
    worker.postMessage({ _tag: "Close" } satisfies ToWorker)
  }
}

// ---- The rate limit: one token bucket per project, refilled by elapsed time ----
const bucket = { tokens: setup.principal.rateLimit.burst, at: Date.now() }
const admit = (now: number): boolean => {
  const { requestsPerMinute, burst } = setup.principal.rateLimit
  bucket.tokens = Math.min(burst, bucket.tokens + ((now - bucket.at) * requestsPerMinute) / 60_000)
  bucket.at = now
  if (bucket.tokens < 1) return false
  bucket.tokens -= 1
  return true
}

// ---- The governed call ----
const dispatcher = new Agent({ connections: 512, keepAliveTimeout: 30_000 })
const url = `${upstream}/v1/chat/completions`
const fail = (res: ServerResponse, status: number, message: string) => {
  if (res.headersSent) return void res.destroy()
  res.writeHead(status, { "content-type": "application/json" })
  res.end(JSON.stringify({ error: { message, type: "invalid_request_error", code: null, param: null } }))
}

const governed = (req: IncomingMessage, res: ServerResponse, text: string) => {
  const principal = principals.get(req.headers.authorization ?? "")
  if (principal === undefined) return fail(res, 401, "invalid key")
  let body: Record<string, unknown>
  try {
    body = JSON.parse(text) as Record<string, unknown>
  } catch {
    return fail(res, 400, "not JSON")
  }
  const now = Date.now()
  if (!admit(now)) return fail(res, 429, "rate limited")
  const stream = body.stream === true
  const messages = body.messages as ReadonlyArray<{ role: string; content: string }>
  const key = (body.metadata as { idempotency_key?: string } | undefined)?.idempotency_key
  const scope = { projectId: principal.projectId, environment: principal.environment }
  const fingerprint = key === undefined ? "" : fingerprintOf("POST", "/v1/chat/completions", body)
  const inputTokens = countChat(messages)
  const requestId = newRequestId(now)
  const period = periodOf(now)
  const hold = { reservationId: newReservationId(now), requestId, projectId: principal.projectId, period, deadline: now + settings.reservationTtlMs }
  const reserve: ReserveArgs = {
    now,
    epoch: 0,
    claim: key === undefined ? undefined : { scope, key, fingerprint },
    request: {
      id: requestId,
      projectId: principal.projectId,
      environment: principal.environment,
      keyId: principal.keyId,
      endpoint: "/v1/chat/completions",
      model,
      route: model,
      stream,
      idempotencyKey: key ?? null,
      rateCardVersion: "rc_2020-01",
      createdAt: now
    },
    hold,
    sizing: {
      chain: [{ name: model, prices, routeLimit: 4096 }],
      inputTokens,
      requested: typeof body.max_tokens === "number" ? body.max_tokens : undefined,
      maxCredits: undefined,
      maxCreditsParam: "X-Max-Credits",
      period
    }
  }
  /** The charge of `tokens` and its settlement; `stored`, the reply rendered with the governance, is the idempotent result. */
  const settlement = (tokens: TokenCounts, reservation: number, t0: number, contentType: string, reply: (governance: Governance) => Uint8Array) => {
    const settledAt = Date.now()
    const charge = settledCharge(tokens, prices, reservation)
    const receiptId = newReceiptId(settledAt)
    const verification = verificationOf({ route: true, schema: true, budget: chargeWithinReservation(tokens, prices, reservation) })
    const governance: Governance = { request_id: requestId, status: "completed", verification, credits_charged: charge, rate_card_version: "rc_2020-01", receipt_id: receiptId }
    const stored = reply(governance)
    const settle: SettleArgs = {
      now: settledAt,
      hold: { ...hold, amount: reservation },
      receiptId,
      organization: principal.organization,
      environment: principal.environment,
      model,
      route: model,
      rateCardVersion: "rc_2020-01",
      tokens,
      usageSource: "reported",
      charge,
      verification,
      attempts: [{ route: model, provider: "mock", outcome: "ok", duration_ms: settledAt - t0 }],
      idempotent: key === undefined ? undefined : { scope, key, ttlMs: settings.idempotencyTtlMs, result: { status: 200, contentType, body: stored } }
    }
    return { settle, stored }
  }
  run("reserve", reserve, (reserved) => {
    if (reserved._tag !== "Committed") return fail(res, 402, "refused")
    const { outputCap, reservation } = reserved.value as Reserved
    const out: Record<string, unknown> = { ...body, model, max_tokens: outputCap }
    delete out.metadata
    const t0 = Date.now()
    if (stream) {
      out.stream_options = { include_usage: true }
      return streamed(res, requestId, body, JSON.stringify(out), (tokens, contentType, reply) => settlement(tokens, reservation, t0, contentType, reply))
    }
    request(url, { method: "POST", dispatcher, headers: { "content-type": "application/json" }, body: JSON.stringify(out) })
      .then(async (up) => ({ status: up.statusCode, raw: await up.body.text() }))
      .then(({ status, raw }) => {
        if (status !== 200) return fail(res, 503, "upstream failed")
        const json = JSON.parse(raw) as { usage: UsageReport }
        const { settle, stored } = settlement(tokensFromUsage(json.usage), reservation, t0, "application/json", (governance) => Buffer.from(withGovernance(raw, governance), "utf8"))
        run("settle", settle, (settled) => {
          if (settled._tag !== "Committed") return fail(res, 500, "settlement failed")
          res.writeHead(200, { "content-type": "application/json", "content-length": String(stored.byteLength), "x-request-id": requestId })
          res.end(stored)
        })
      })
      .catch(() => fail(res, 503, "upstream failed"))
  })
}

type Settlement = (tokens: TokenCounts, contentType: string, reply: (governance: Governance) => Uint8Array) => { settle: SettleArgs; stored: Uint8Array }

/**
 * A streamed call, with Tollgate's guarantees and none of its pipeline: the reservation's fsync runs
 * while the upstream opens and the headers wait for it (docs/decisions/0013); each upstream event is
 * forwarded as it arrives through Tollgate's own chat-completions renderer; at [DONE] the reported
 * usage is settled (signed receipt, the frames stored for replay) before the governance event and
 * [DONE] go out. What it leaves out: cuts, disconnects and counted usage (the bench's streams end).
 */
const streamed = (res: ServerResponse, requestId: string, body: Record<string, unknown>, payload: string, settlement: Settlement) => {
  let synced = false
  let opened: (() => void) | undefined
  run("sync", undefined, (outcome) => {
    if (outcome._tag !== "Committed") return fail(res, 500, "the reservation could not be made durable")
    synced = true
    opened?.()
  })
  const includeUsage = (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true
  request(url, { method: "POST", dispatcher, headers: { "content-type": "application/json" }, body: payload })
    .then((up) => {
      if (up.statusCode !== 200) {
        up.body.resume()
        return fail(res, 503, "upstream failed")
      }
      const forward = async () => {
        res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", "x-request-id": requestId })
        const renderer = chatCompletionsSurface.streamRenderer({ includeUsage, requestId, nowMs: Date.now() })
        const sent: Array<Uint8Array> = []
        let usage: UsageReport | undefined
        const parser = makeSseParser()
        reading: for await (const chunk of up.body as AsyncIterable<Buffer>) {
          for (const data of parser.push(chunk)) {
            if (data === "[DONE]") break reading
            const json = JSON.parse(data) as Record<string, unknown>
            if (json.usage !== null && typeof json.usage === "object") usage = json.usage as UsageReport
            for (const frame of renderer.onChunk(data, json)) {
              sent.push(frame)
              res.write(frame)
            }
          }
        }
        if (usage === undefined) return void res.destroy()
        const tokens = tokensFromUsage(usage)
        const { settle, stored } = settlement(tokens, "text/event-stream", (governance) => Buffer.concat([...sent, ...renderer.complete(governance, tokens)]))
        run("settle", settle, (settled) => {
          if (settled._tag !== "Committed") return void res.destroy()
          // The stored replay is every frame sent, then the governance event and [DONE]: the rest of it is what is left to send.
          res.end(stored.subarray(sent.reduce((n, f) => n + f.byteLength, 0)))
        })
      }
      const go = () => void forward().catch(() => res.destroy())
      if (synced) go()
      else opened = go
    })
    .catch(() => fail(res, 503, "upstream failed"))
}

const server = createServer({ keepAlive: true }, (req, res) => {
  if (req.method !== "POST" || req.url !== "/v1/chat/completions") return fail(res, 404, "not found")
  const chunks: Array<Buffer> = []
  req.on("data", (c: Buffer) => chunks.push(c))
  req.on("end", () => governed(req, res, chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks).toString("utf8")))
})
server.keepAliveTimeout = 60_000
server.headersTimeout = 61_000
// `--profile` / `--alloc-profile` (bench/profile.ts --target floor): bench/lib/profilers.ts.
await installProfilers()
server.listen(Number(arg("--port") ?? "0"), "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ ready: true, port: (server.address() as AddressInfo).port, key: setup.key, dbPath }) + "\n")
})
const stop = () => {
  server.close()
  server.closeAllConnections()
  closeStore(() =>
    void runtime.dispose().finally(() => {
      rmSync(dir, { recursive: true, force: true })
      process.exit(0)
    })
  )
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
