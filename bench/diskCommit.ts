/**
 * `npx tsx bench/diskCommit.ts [--gaps 0,1,5,20] [--commits N] [--rounds R] [--sync FULL|NORMAL]`:
 * what one synced SQLite commit costs on this machine, by how long the process sat idle before it.
 *
 * One small row a transaction, on a WAL file in the temp dir with Tollgate's pragmas, one commit at a
 * time, `--gap` ms of idleness (a timer) before each; 0 means back to back (`setImmediate`). The file
 * is first written past one checkpoint, so the WAL is reused as it is in a running gateway, not grown.
 * The gaps are interleaved round by round so they share the box's noise. Reports wall and CPU
 * (`process.cpuUsage`, user + system) per commit, p50 [p10, p90] over all of a gap's commits.
 *
 * Why (decisions/0040): at one caller a governed call waits for one such commit between its
 * upstream's answer and its own, and the commit's price depends on the idleness before it, which a
 * back-to-back measurement (the ≈ 0.2 ms issue 18 assumed) hides.
 */
import BetterSqlite3 from "better-sqlite3"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { arg, numArg } from "./lib/args.ts"
import { rank } from "./lib/stats.ts"

const gaps = (arg("--gaps") ?? "0,1,5,20").split(",").map(Number)
const commits = numArg("--commits", 200)
const rounds = numArg("--rounds", 3)
const sync = arg("--sync") ?? "FULL"

const dir = mkdtempSync(join(tmpdir(), "tollgate-disk-"))
const db = new BetterSqlite3(join(dir, "commit.db"))
db.pragma("journal_mode = WAL")
db.pragma(`synchronous = ${sync}`)
db.exec("CREATE TABLE row (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
const insert = db.prepare("INSERT INTO row (body) VALUES (?)")
const body = "x".repeat(600)
const commitOne = db.transaction(() => void insert.run(body))
// Past the first automatic checkpoint (1,000 pages), so later commits overwrite the WAL, not extend it.
for (let i = 0; i < 3000; i++) commitOne()

const wait = (gapMs: number) => new Promise<void>((r) => (gapMs === 0 ? setImmediate(r) : setTimeout(r, gapMs)))
const wall = new Map<number, Array<number>>(gaps.map((g) => [g, []]))
const cpu = new Map<number, Array<number>>(gaps.map((g) => [g, []]))

for (let round = 0; round < rounds; round++) {
  for (const gap of gaps) {
    for (let i = 0; i < commits; i++) {
      await wait(gap)
      const c0 = process.cpuUsage()
      const t0 = process.hrtime.bigint()
      commitOne()
      const t1 = process.hrtime.bigint()
      const c = process.cpuUsage(c0)
      wall.get(gap)!.push(Number(t1 - t0) / 1000)
      cpu.get(gap)!.push(c.user + c.system)
    }
  }
}
db.close()
rmSync(dir, { recursive: true, force: true })

const cell = (xs: Array<number>) => {
  const sorted = Float64Array.from(xs).sort()
  return `${rank(sorted, 0.5).toFixed(0)} [${rank(sorted, 0.1).toFixed(0)}, ${rank(sorted, 0.9).toFixed(0)}]`
}
process.stdout.write(
  `\nOne-row commits, synchronous=${sync}, WAL reused; ${commits} × ${rounds} rounds per gap, interleaved. µs p50 [p10, p90]\n\n` +
    `| idle before the commit | wall | CPU (user + system) |\n| ---: | ---: | ---: |\n` +
    gaps.map((g) => `| ${g === 0 ? "none (back to back)" : `${g} ms`} | ${cell(wall.get(g)!)} | ${cell(cpu.get(g)!)} |`).join("\n") +
    "\n"
)
