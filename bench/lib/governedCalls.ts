/**
 * One governed call as the store worker receives it, for the store bench (bench/storeCost.ts):
 * a file store built by the migrations with the worker's pragmas, and the
 * reservation (with an idempotency claim) and settlement (signed receipt, ≈ 1 KiB stored reply)
 * arguments of call `i`, shaped as the Gateway sends them.
 */
import { SqliteClient } from "@effect/sql-sqlite-node"
import BetterSqlite3 from "better-sqlite3"
import { Effect } from "effect"
import { join } from "node:path"
import { newReceiptId, newRequestId, newReservationId } from "../../src/domain/ids.ts"
import type { ReserveArgs, SettleArgs } from "../../src/store/chatTransactions.ts"
import { runMigrations } from "../../src/store/migrations.ts"

const projectId = "prj_bench"
const scope = { projectId, environment: "production" as const }
const model = "gpt-4o-mini"
const reply = new TextEncoder().encode(JSON.stringify({ id: "chatcmpl-bench", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "x".repeat(900) } }] }))

/** A migrated store file in `dir` with the bench's project, opened as the store worker opens it (WAL, `sync`, foreign keys). */
export const openStore = async (dir: string, sync: string) => {
  const filename = join(dir, "t.db")
  await Effect.runPromise(runMigrations.pipe(Effect.provide(SqliteClient.layer({ filename })), Effect.orDie))
  const db = new BetterSqlite3(filename)
  db.pragma("journal_mode = WAL")
  db.pragma(`synchronous = ${sync}`)
  db.pragma("foreign_keys = ON")
  db.pragma("temp_store = MEMORY")
  db.prepare(`INSERT INTO projects (id, organization, name, budget_credits, requests_per_minute, burst, created_at, updated_at) VALUES (?, 'org_bench', 'bench', 1000000000000000, 60000000, 1000000, 0, 0)`).run(projectId)
  return { db, wal: `${filename}-wal` }
}

/** The two transactions of call `i` at `now`, as the Gateway sends them to the worker. */
export const callArgs = (i: number, now: number): { reserve: ReserveArgs; settle: (amount: number) => SettleArgs } => {
  const requestId = newRequestId(now)
  const hold = { reservationId: newReservationId(now), requestId, projectId, period: "2026-11", deadline: now + 60_000 }
  const key = `bench-${now}-${i}`
  return {
    reserve: {
      now,
      epoch: 0,
      claim: { scope, key, fingerprint: "f".repeat(64) },
      request: { id: requestId, projectId, environment: scope.environment, keyId: "key_bench", endpoint: "/v1/chat/completions", model, route: model, stream: false, idempotencyKey: key, rateCardVersion: "rc_2026-11", createdAt: now },
      hold,
      sizing: { chain: [{ name: model, prices: { input: 150, output: 600 }, routeLimit: 4096 }], inputTokens: 200, requested: 400, maxCredits: undefined, maxCreditsParam: "X-Max-Credits", period: "2026-11" }
    },
    settle: (amount) => ({
      now,
      hold: { ...hold, amount },
      receiptId: newReceiptId(now),
      organization: "org_bench",
      environment: scope.environment,
      model,
      route: model,
      rateCardVersion: "rc_2026-11",
      tokens: { input: 200, cached_input: 0, output: 120, reasoning: 0 },
      usageSource: "reported",
      charge: 103,
      verification: { state: "verified", checks: ["route", "schema", "budget"], failed_checks: [] },
      attempts: [{ route: model, provider: "mock", outcome: "ok", status: 200, duration_ms: 20 }],
      idempotent: { scope, key, ttlMs: 86_400_000, result: { status: 200, contentType: "application/json", body: reply } }
    })
  }
}

export const refuse = (e: unknown): never => {
  throw new Error(`reservation refused: ${JSON.stringify(e)}`)
}
