/**
 * `npx tsx bench/breakdown.ts` (N=1000 by default): where a governed call's CPU goes, in-process,
 * without the HTTP server: each building block run N times in sequence on the real services
 * (SQLite file with WAL + synchronous=FULL, the bench mock upstream with no delay), CPU and wall
 * time per operation. Complements bench/profile.ts, whose flat Effect stacks hide the caller.
 * `CONCURRENCY=32` keeps that many operations in flight (commits then batch as under load),
 * `ONLY=gateway` runs only the blocks whose name contains it, `ALLOC=1` adds bytes allocated per
 * operation. In-process figures vary ≈ 3% between runs where the HTTP bench varies ≈ 10%, but the
 * first block of a run is slower (JIT warm-up): compare blocks run in alternation, not one run each.
 * `ALLOC=sites` also lists the functions that allocate the most per operation (GC is ≈ 6–14% of the
 * event loop's samples under load, bench/README.md).
 */
import { Effect, Layer, ManagedRuntime, Option, Redacted } from "effect"
import { mkdtempSync } from "node:fs"
import { Session } from "node:inspector/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { SqlClient } from "@effect/sql"
import { makeSettings, Settings } from "../src/domain/config.ts"
import { ServicesLive } from "../src/server.ts"
import { Bootstrap } from "../src/services/Bootstrap.ts"
import { KeyRegistry } from "../src/services/KeyRegistry.ts"
import { Gateway, type GatewayReply } from "../src/services/Gateway.ts"
import { IdempotencyStore } from "../src/services/IdempotencyStore.ts"
import { Ledger } from "../src/services/Ledger.ts"
import { Router } from "../src/services/Router.ts"
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { FiberSet, Fiber } from "effect"
import { countChat } from "../src/services/Tokenizer.ts"
import { chatCompletionsSurface } from "../src/services/surfaces/chatCompletions.ts"
import { startChild } from "./lib/procs.ts"
import { sourcePosition } from "./lib/sourceMap.ts"

const mock = await startChild<{ port: number }>("mock", process.execPath, ["--import", "tsx", "bench/targets/mock.ts", "--delay", "0"], { cwd: process.cwd() })
const dir = mkdtempSync(join(tmpdir(), "tg-bd-"))
const model = "gpt-4o-mini"
const settings = makeSettings({
  databaseUrl: process.env.MEM ? "sqlite::memory:" : `sqlite:${join(dir, "t.db")}`,
  adminToken: Option.some(Redacted.make("x")),
  gateway: {
    providers: { mock: { type: "openai", base_url: `http://127.0.0.1:${mock.ready.port}/v1` } },
    routes: [{ name: model, provider: "mock", upstream_model: model, max_output_tokens: 4096, auto: true }],
    rate_cards: [{ version: "rc_2020-01", effective_from: "2020-01-01T00:00:00Z", prices: { [model]: { input: 150, output: 600 } } }],
    default_project: { budget_credits: 1e15, requests_per_minute: 60_000_000, burst: 1_000_000 }
  }
})
const rt = ManagedRuntime.make(ServicesLive.pipe(Layer.provide(Layer.succeed(Settings, settings)), Layer.provide(Layer.setTracerEnabled(false))))
const key = await rt.runPromise(Effect.map(Bootstrap, (b) => b.firstStart!.developmentKey))
const principal = await rt.runPromise(Effect.flatMap(KeyRegistry, (k) => k.authenticate(`Bearer ${key}`)))
const scope = { projectId: principal.projectId, environment: principal.environment }
const body = (n: number) => ({ model, messages: [{ role: "system", content: "You are a concise assistant for an e-commerce support team." }, { role: "user", content: "Where is my order 48213-CX? It has said label created since Monday." }], max_tokens: 400, metadata: { idempotency_key: `bd-${Date.now()}-${n}` } })

/** `CONCURRENCY=32`: calls in flight at once (default 1: one at a time, each commit pays its own fsync). */
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 1)
/** `ONLY=gateway`: run only the blocks whose name contains it. */
const ONLY = process.env.ONLY
/**
 * `ALLOC=1`: also the bytes allocated per operation, garbage included (V8's sampling heap profiler,
 * one sample per 4 KiB allocated, keeping objects the GC collected). CPU figures then include its cost.
 */
const ALLOC = process.env.ALLOC === "1" || process.env.ALLOC === "sites"
/** `ALLOC=sites`: also the 25 functions that allocate the most, per operation, at their TypeScript line. */
const SITES = process.env.ALLOC === "sites"
const allocation = await (async () => {
  const session = new Session()
  session.connect()
  if (ALLOC) await session.post("HeapProfiler.enable")
  return {
    start: () =>
      session.post("HeapProfiler.startSampling", {
        samplingInterval: 4096,
        // Protocol flags newer than @types/node's copy of the protocol.
        ...({ includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true } as object)
      }),
    stop: async () => {
      const { profile } = await session.post("HeapProfiler.stopSampling")
      let bytes = 0
      const sites = new Map<string, number>()
      const walk = (node: typeof profile.head): void => {
        bytes += node.selfSize
        if (SITES && node.selfSize > 0) {
          const f = node.callFrame
          const where = `${f.functionName || "(anonymous)"}  ${f.url.replace(/^.*\/(node_modules|src|spec|bench)\//, "$1/")}:${sourcePosition(f).line + 1}`
          sites.set(where, (sites.get(where) ?? 0) + node.selfSize)
        }
        for (const child of node.children) walk(child)
      }
      walk(profile.head)
      return { bytes, sites }
    }
  }
})()

const measure = async (name: string, n: number, f: (i: number) => Effect.Effect<unknown, unknown, any>) => {
  if (ONLY !== undefined && !name.includes(ONLY)) return
  await rt.runPromise(Effect.forEach(Array.from({ length: 50 }, (_, i) => i), (i) => Effect.ignore(f(-i - 1)), { discard: true }))
  if (ALLOC) await allocation.start()
  const c0 = process.cpuUsage(); const t0 = performance.now()
  await rt.runPromise(Effect.forEach(Array.from({ length: n }, (_, i) => i), (i) => Effect.ignore(f(i)), { discard: true, concurrency: CONCURRENCY }))
  const c = process.cpuUsage(c0); const wall = performance.now() - t0
  const alloc = ALLOC ? await allocation.stop() : undefined
  const allocated = alloc === undefined ? "" : `   allocated ${(alloc.bytes / n / 1024).toFixed(1).padStart(6)} KiB/op`
  console.log(name.padEnd(40), `cpu ${((c.user + c.system) / n).toFixed(0).padStart(5)} µs/op   wall ${((wall * 1000) / n).toFixed(0).padStart(5)} µs/op${allocated}`)
  if (alloc !== undefined && SITES) {
    for (const [where, size] of [...alloc.sites].sort((a, b) => b[1] - a[1]).slice(0, 25)) {
      console.log(`    ${(size / n / 1024).toFixed(2).padStart(6)} KiB/op  ${where}`)
    }
  }
}
const N = Number(process.env.N ?? 1000)
await measure("authenticate (cached)", N, () => Effect.flatMap(KeyRegistry, (k) => k.authenticate(`Bearer ${key}`)))
await measure("idempotency.peek", N, (i) => Effect.flatMap(IdempotencyStore, (s) => s.peek(scope, `nope-${i}`, "fp")))
await measure("ledger.window", N, () => Effect.flatMap(Ledger, (l) => l.window(principal.projectId, "2026-11")))
await measure("sql SELECT 1", N, () => Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT 1`))
await measure("sql withTransaction(SELECT 1)", N, () => Effect.flatMap(SqlClient.SqlClient, (sql) => sql.withTransaction(sql`SELECT 1`)))
await measure("router.complete (upstream call)", N, () => Effect.flatMap(Router, (r) => Effect.flatMap(r.candidates(model), (chain) => r.complete(chain, () => body(0) as any))))
await measure("HttpClient raw post+text", N, () => Effect.flatMap(HttpClient.HttpClient, (c) => Effect.scoped(Effect.flatMap(c.execute(HttpClientRequest.post(`http://127.0.0.1:${mock.ready.port}/v1/chat/completions`).pipe(HttpClientRequest.bodyText(JSON.stringify(body(0)), "application/json"))), (r) => r.text))))
await measure("countChat", N, () => Effect.sync(() => countChat(body(0).messages)))
await measure("FiberSet.run+join noop", N, () => Effect.scoped(Effect.flatMap(FiberSet.make(), (fs) => Effect.flatMap(FiberSet.run(fs, Effect.void), Fiber.join))))
await measure("gateway.handle non-stream (full)", N, (i) => Effect.flatMap(Gateway, (g) => g.handle({ principal, surface: chatCompletionsSurface, body: body(i), idempotencyKeyHeader: undefined, maxCreditsHeader: undefined, headers: {} })))
await measure("gateway.handle owned fiber (fast path)", N, (i) =>
  Effect.flatMap(Gateway, (g) =>
    Effect.withFiberRuntime<GatewayReply, unknown>((fiber) => {
      g.adopt(fiber)
      return g.handle({ principal, surface: chatCompletionsSurface, body: body(i), idempotencyKeyHeader: undefined, maxCreditsHeader: undefined, headers: {} })
    })
  )
)
await measure("gateway.handle stream, frames drained", N, (i) =>
  Effect.flatMap(Gateway, (g) =>
    Effect.flatMap(g.handle({ principal, surface: chatCompletionsSurface, body: { ...body(i), stream: true }, idempotencyKeyHeader: undefined, maxCreditsHeader: undefined, headers: {} }), (reply) =>
      reply._tag === "Sse"
        ? Effect.promise(async () => {
            for await (const _ of reply.frames) void _
          })
        : Effect.void
    )
  )
)
await measure("gateway.handle no idempotency key", N, (i) => { const b = body(i) as any; delete b.metadata; return Effect.flatMap(Gateway, (g) => g.handle({ principal, surface: chatCompletionsSurface, body: b, idempotencyKeyHeader: undefined, maxCreditsHeader: undefined, headers: {} })) })
await rt.dispose(); await mock.stop()
