/**
 * `tollgate audit` on both engines: a store built by real traffic through a real gateway on SQLite
 * and one on PostgreSQL, each tampered with by the same cases (test/audit/cases.ts), each case
 * audited through the same checkers with signature workers (--jobs 2): the findings must be exactly
 * the ones the case names, on either engine. PostgreSQL: the loopback test server
 * (TOLLGATE_TEST_PG_URL); skipped, saying so, when it does not answer.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { periodOf } from "../../spec/ledger.ts"
import { auditCommand } from "../../src/cli/audit.ts"
import { pgReachable, TEST_PG_URL } from "../support/pg.ts"
import { tamperCases } from "./cases.ts"
import { audit, buildTrafficStore, type Engine, named, tamperedCopy, type TrafficStore } from "./fixture.ts"

const pgUp = pgReachable()
if (!pgUp) process.stderr.write(`test/audit/engines.test.ts: PostgreSQL does not answer at ${TEST_PG_URL}: its half is skipped\n`)

const engines: ReadonlyArray<{ readonly engine: Engine; readonly label: string; readonly skip: boolean }> = [
  { engine: "sqlite", label: "SQLite", skip: false },
  { engine: "pg", label: pgUp ? "PostgreSQL" : `PostgreSQL (skipped: no server at ${TEST_PG_URL})`, skip: !pgUp }
]

for (const { engine, label, skip } of engines) {
  describe.skipIf(skip)(`tollgate audit on ${label}: a store built by real traffic`, () => {
    let store: TrafficStore
    let period: string
    beforeAll(async () => {
      store = await buildTrafficStore(engine)
      period = periodOf(Date.now())
    }, 60_000)
    afterAll(async () => {
      await store?.close()
    })

    for (const c of tamperCases) {
      it(c.name, async () => {
        let expected!: Array<string>
        const copy = await tamperedCopy(engine, store.snapshot, async (db) => {
          expected = await c.plant(db, { projectA: store.projectA, projectB: store.projectB, budgetB: store.budgetB, period })
        })
        const r = await audit(copy, { jobs: 2 })
        expect(r.engine).toBe(engine === "pg" ? "postgres" : "sqlite")
        expect(r.summary.stats.receipts).toBe(21) // every receipt of the traffic was read and checked
        expect(named(r)).toEqual([...expected].sort())
      })
    }

    it("the CLI: --database-url (or --database) names the store, --jobs the workers; exit 0 clean, 1 with findings", async () => {
      const run = async (args: Array<string>) => {
        let out = ""
        const spy = vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => {
          out += String(chunk)
          return true
        })
        try {
          return { code: await auditCommand(args), json: () => JSON.parse(out) as { engine: string; jobs: number; findings_total: number } }
        } finally {
          spy.mockRestore()
        }
      }
      const clean = await run(["--database-url", await tamperedCopy(engine, store.snapshot), "--jobs", "2", "--json", "--quiet"])
      expect(clean.code).toBe(0)
      expect(clean.json()).toMatchObject({ engine: engine === "pg" ? "postgres" : "sqlite", jobs: 2, findings_total: 0 })
      const dirty = await tamperedCopy(engine, store.snapshot, async (db) => {
        await db.run(`UPDATE budget_windows SET spent = spent + 1 WHERE project_id = ?`, store.projectA)
      })
      expect((await run(["--database", dirty, "--jobs", "1", "--json", "--quiet"])).code).toBe(1)
    })

    it("--project and --period select the same rows as on the other engine", async () => {
      const copy = await tamperedCopy(engine, store.snapshot)
      // Project B's window and its key's (issue 41: every call is held in its key's scope too).
      expect((await audit(copy, { project: store.projectB })).summary.stats).toMatchObject({ receipts: 4, chains: 1, windows: 2 })
      const now = await audit(copy, { period })
      expect(named(now)).toEqual([])
      expect(now.summary.stats.receipts).toBe(21)
      expect((await audit(copy, { period: "2019-01" })).summary.stats.receipts).toBe(0)
    })
  })
}
