/**
 * The governed functions on PostgreSQL reach their rows by key, never by scanning a table (issue 40;
 * docs/decisions/0053, migrations 0023 and 0024). PL/pgSQL plans each statement once per connection
 * and keeps the plan; a join of a batch's JSON to a table, planned while the table was young, was a
 * sequential scan of the whole table on every settlement for as long as the connection lived.
 *
 * Checked by PostgreSQL's own counters, not by time: concurrent calls reserve and settle through the
 * store port on a fresh schema, the node is closed (its server processes flush their statistics as
 * they exit), and `pg_stat_user_tables.seq_scan` of the tables a call writes must not have grown with
 * the settlement statements. Before 0023 each settlement scanned `reservations` three times,
 * `requests` twice, `budget_windows`, `chain_heads` and `scope_windows` once.
 */
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { Projects } from "../../src/services/Projects.ts"
import { ChatStore } from "../../src/store/ChatStore.ts"
import { pgSettleBatches } from "../../src/store/pgChatStore.ts"
import { freshSchema, onEngines, pgQuerySync, TEST_PG_URL } from "../support/pg.ts"
import { makePgStoreNode } from "../support/pgStoreNode.ts"
import { reserveArgs, settleArgs } from "../support/portArgs.ts"

const TABLES = ["reservations", "requests", "budget_windows", "chain_heads", "scope_windows", "idempotency", "receipts"]

describe.runIf(onEngines("test/store/pgKeyedAccess.test.ts"))("PostgreSQL's governed functions reach rows by key", () => {
  it("concurrent reservations and settlements (keys, end users, idempotency claims) scan none of the tables they write", async () => {
    const schema = freshSchema()
    try {
      const scans = (): Record<string, number> =>
        Object.fromEntries(
          pgQuerySync<{ relname: string; seq_scan: number }>(TEST_PG_URL, `SELECT relname, seq_scan FROM pg_stat_user_tables WHERE schemaname = ?`, [schema.name]).map(
            (r) => [r.relname, Number(r.seq_scan)]
          )
        )
      /** The counters once every server process of a closed node has flushed them: two equal reads in a row. */
      const settled = async (): Promise<Record<string, number>> => {
        let last = JSON.stringify(scans())
        for (let i = 0; i < 50; i++) {
          await new Promise((r) => setTimeout(r, 100))
          const now = JSON.stringify(scans())
          if (now === last) return JSON.parse(now) as Record<string, number>
          last = now
        }
        return JSON.parse(last) as Record<string, number>
      }

      // The schema, a project and its first window and head, by a first node; its scans are the baseline.
      const setup = makePgStoreNode(schema.url, { pgPoolSize: 4 })
      const project = await setup.runPromise(
        Effect.flatMap(Projects, (p) => p.create({ name: "keyed", organization: "org_keyed", budget_credits: 1_000_000, rate_limit: { requests_per_minute: 60, burst: 10 } }))
      )
      await setup.runPromise(Effect.flatMap(ChatStore, (s) => Effect.flatMap(s.reserve(reserveArgs(project.id, 5)), () => Effect.void)))
      await setup.dispose()
      const before = await settled()

      const node = makePgStoreNode(schema.url, { pgPoolSize: 8 })
      const batchesBefore = pgSettleBatches.batches
      const call = (i: number) =>
        node.runPromise(
          Effect.gen(function* () {
            const store = yield* ChatStore
            const args = reserveArgs(project.id, 10, { keyId: `key_${i % 3}`, endUser: `user_${i % 5}`, claim: { key: `idem-${i}`, fingerprint: `fp-${i}` } })
            yield* store.reserve(args)
            yield* store.settle(settleArgs(args, 10, 7))
          })
        )
      for (let round = 0; round < 4; round++) await Promise.all(Array.from({ length: 16 }, (_, i) => call(round * 16 + i)))
      const statements = pgSettleBatches.batches - batchesBefore
      await node.dispose()
      const after = await settled()

      const grown = Object.fromEntries(TABLES.map((t) => [t, (after[t] ?? 0) - (before[t] ?? 0)]))
      console.log(`[issue 40] 64 governed calls in ${statements} settlement statements; sequential scans: ${JSON.stringify(grown)}`)
      expect(statements).toBeGreaterThan(0)
      // Fewer than one a settlement statement (before 0023: one to three each, a table): whatever else
      // reads a table whole now and then, a settlement never does.
      for (const t of TABLES) expect(grown[t], `sequential scans of ${t}`).toBeLessThan(statements)
    } finally {
      schema.drop()
    }
  }, 60_000)
})
