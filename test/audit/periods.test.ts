/**
 * Windows and the --period walk, on a synthetic store spanning two months whose settlement order
 * interleaves the windows near their edge (a request started in January can settle after one started
 * in February).
 */
import Database from "better-sqlite3"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { beforeAll, describe, expect, it } from "vitest"
import { audit, named, tampered } from "./fixture.ts"
import { buildSyntheticStore, type SyntheticStore } from "./synthetic.ts"

let store: SyntheticStore

beforeAll(async () => {
  store = await buildSyntheticStore(join(mkdtempSync(join(tmpdir(), "tollgate-audit-periods-")), "synthetic.db"), {
    receipts: 1500,
    projects: 3,
    periods: ["2026-01", "2026-02"]
  })
})

/** The first receipt, in seq order, of `period` in `project`, and the receipt just before it. */
const edge = (path: string, project: string, period: string) => {
  const db = new Database(path, { readonly: true })
  try {
    const first = db.prepare(`SELECT id, seq FROM receipts WHERE project_id = ? AND period = ? ORDER BY seq LIMIT 1`).get(project, period) as { id: string; seq: number }
    const before = db.prepare(`SELECT id, seq, request_id FROM receipts WHERE project_id = ? AND seq = ?`).get(project, first.seq - 1) as { id: string; request_id: string }
    const interleaved = db
      .prepare(`SELECT COUNT(*) AS n FROM receipts WHERE project_id = ? AND period <> ? AND seq > ? AND seq < (SELECT MAX(seq) FROM receipts WHERE project_id = ? AND period = ?)`)
      .get(project, period, first.seq, project, period) as { n: number }
    return { first, before, interleaved: interleaved.n }
  } finally {
    db.close()
  }
}

describe("tollgate audit over several windows", () => {
  it("a clean synthetic store is clean, window by window", async () => {
    const r = await audit(tampered(store.path))
    expect(named(r)).toEqual([])
    expect(r.summary.stats).toMatchObject({ receipts: 1500, chains: 3, windows: 6, idempotencyRecords: 150 })
  })

  it("--period walks the seq range the window spans, including receipts of the next window interleaved in it", async () => {
    const path = tampered(store.path)
    const { interleaved } = edge(path, store.projects[0]!, "2026-01")
    expect(interleaved).toBeGreaterThan(0) // the store does interleave, or this test proves nothing
    const jan = await audit(path, { period: "2026-01" })
    expect(named(jan)).toEqual([])
    expect(jan.summary.stats.windows).toBe(3)
    expect(jan.summary.stats.receipts).toBeGreaterThan(750)
    expect(jan.summary.stats.receipts).toBeLessThan(1500)
  })

  it("--period checks the link into the window: a changed hash on the receipt before it is named at the window's first receipt", async () => {
    const project = store.projects[1]!
    let e!: ReturnType<typeof edge>
    const path = tampered(store.path, (db) => {
      e = edge(store.path, project, "2026-02")
      db.prepare(`UPDATE receipts SET hash = ? WHERE id = ?`).run("f".repeat(64), e.before.id)
    })
    expect(named(await audit(path, { period: "2026-02" }))).toEqual([`chain_broken ${e.first.id}`])
    // The whole-store walk links by the signed body, so there the edited column is what it names.
    expect(named(await audit(path))).toEqual([`receipt_column_mismatch ${e.before.id}`])
  })

  it("--period names a gap just before the window", async () => {
    const project = store.projects[2]!
    let e!: ReturnType<typeof edge>
    const path = tampered(store.path, (db) => {
      e = edge(store.path, project, "2026-02")
      db.prepare(`DELETE FROM receipts WHERE id = ?`).run(e.before.id)
    })
    const r = await audit(path, { period: "2026-02" })
    expect(named(r)).toEqual([`chain_gap ${e.first.id}`])
    expect(r.findings[0]!.detail).toEqual({ missing_from_seq: e.first.seq - 1, missing_to_seq: e.first.seq - 1 })
  })
})
