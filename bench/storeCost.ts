/**
 * `npx tsx bench/storeCost.ts [--calls N] [--rounds R] [--sync FULL|NORMAL] [--batch N] [--frame-calls N] [--compare DIR]`: the CPU
 * the store worker spends on one governed call, and where it goes. Runs the production transaction
 * bodies (src/store/chatTransactions.ts, as the worker runs them: a reservation with an idempotency
 * claim, then a settlement with a signed receipt and a stored ≈ 1 KiB reply, each its own COMMIT as at
 * one caller or `--batch N` to a COMMIT as a busy worker commits them, through the worker's group
 * commit: reservations' COMMITs unsynced, settlements' synced) on a fresh migrated file store with the worker's pragmas, and reports per call:
 *
 * - CPU µs (`process.cpuUsage`) of each transaction, its COMMIT included, and wall µs;
 * - each prepared statement's own time (its `run`/`get`/`all` timed by wrapping `db.prepare`);
 * - the receipt's seal (canonical JSON, SHA-256, Ed25519) alone; what is left is the bodies' own JS;
 * - WAL frames a call (one 4 KiB page each, written by the committing thread), counted from the WAL's
 *   growth over `--frame-calls` more calls with auto-checkpoints off: exact, the same on every machine
 *   (docs/decisions/0009; bench/walFrames.ts counted them before issue 39 folded it in here).
 *
 * `--compare DIR` runs another checkout's store code (e.g. a checkout of main) interleaved with this one's in the
 * same process, round by round, so the two columns share the box's noise.
 */
import type BetterSqlite3 from "better-sqlite3"
import { generateKeyPairSync } from "node:crypto"
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { pathToFileURL } from "node:url"
import type { Sealer } from "../src/store/ledgerStatements.ts"
import type { TxOutcome } from "../src/store/syncTransactions.ts"
import { arg, numArg } from "./lib/args.ts"
import { callArgs, openStore, refuse } from "./lib/governedCalls.ts"
import { median, spread } from "./lib/stats.ts"

const CALLS = numArg("--calls", 2000)
const ROUNDS = numArg("--rounds", 5)
const SYNC = arg("--sync") ?? "FULL"
/** Calls per COMMIT: 1 is one caller; a busy worker commits the calls of one message together (e.g. 32). */
const BATCH = numArg("--batch", 1)
const compare = arg("--compare")
/** Calls counted for the WAL frames, after the timed ones. */
const FRAME_CALLS = numArg("--frame-calls", 500)
/** A WAL frame: a 24-byte header and one 4 KiB page. */
const FRAME_BYTES = 4096 + 24

type ChatTransactionsModule = typeof import("../src/store/chatTransactions.ts")
type SealModule = typeof import("../spec/receipt.ts")
type SyncModule = typeof import("../src/store/syncTransactions.ts")
type SodiumModule = typeof import("../src/store/sodium.ts")
interface Tree {
  readonly name: string
  readonly tx: ChatTransactionsModule
  readonly seal: SealModule
  readonly sync: SyncModule
  /** What the tree's store worker signs with: libsodium's signer where the tree has one (0030), else the key itself. */
  readonly signer: Parameters<SealModule["sealReceipt"]>[0]
}
const privateKey = generateKeyPairSync("ed25519").privateKey
const load = async (name: string, root: string): Promise<Tree> => {
  const sodium = join(root, "src/store/sodium.ts")
  return {
    name,
    tx: (await import(pathToFileURL(join(root, "src/store/chatTransactions.ts")).href)) as ChatTransactionsModule,
    seal: (await import(pathToFileURL(join(root, "spec/receipt.ts")).href)) as SealModule,
    sync: (await import(pathToFileURL(join(root, "src/store/syncTransactions.ts")).href)) as SyncModule,
    signer: existsSync(sodium) ? ((await import(pathToFileURL(sodium).href)) as SodiumModule).fastestEd25519().signerFor(privateKey) : privateKey
  }
}
const trees = [await load("this", resolve(".")), ...(compare === undefined ? [] : [await load("compare", resolve(compare))])]


/** Milliseconds spent per label, summed while `on`. */
class Tally {
  on = false
  readonly ms = new Map<string, number>()
  add(label: string, t0: number) {
    if (this.on) this.ms.set(label, (this.ms.get(label) ?? 0) + performance.now() - t0)
  }
}

/** A short name for a statement: its verb, table and what it sets or picks ("UPDATE reservations SET state = 'settled'"). */
const labelOf = (sql: string): string => {
  const s = sql.replace(/\s+/g, " ").trim()
  const m = /^(INSERT INTO|UPDATE|DELETE FROM|SELECT .*? FROM) (\w+)/i.exec(s)
  if (m === null) return s.slice(0, 40)
  const verb = m[1]!.split(" ")[0]!.toUpperCase()
  const detail = verb === "UPDATE" ? /SET (.{0,24})/.exec(s)?.[1] : verb === "DELETE" ? /WHERE (.{0,24})/.exec(s)?.[1] : ""
  return `${verb} ${m[2]} ${detail ?? ""}`.trim()
}

/** Every statement prepared on `db` from now on times its run/get/all into `tally`. */
const timeStatements = (db: BetterSqlite3.Database, tally: Tally) => {
  const prepare = db.prepare.bind(db)
  db.prepare = ((sql: string) => {
    const stmt = prepare(sql) as unknown as Record<"run" | "get" | "all", (...a: Array<unknown>) => unknown>
    const label = labelOf(sql)
    for (const method of ["run", "get", "all"] as const) {
      const f = stmt[method]!.bind(stmt)
      stmt[method] = (...a) => {
        const t0 = performance.now()
        try {
          return f(...a)
        } finally {
          tally.add(label, t0)
        }
      }
    }
    return stmt
  }) as typeof db.prepare
}


interface Figures {
  reserveCpu: number
  settleCpu: number
  /** Of the two: kernel time (the COMMIT's write and fsync). */
  sys: number
  reserveWall: number
  settleWall: number
  parts: Map<string, number>
  /** WAL frames written per call. */
  frames: number
}

const measure = async (tree: Tree): Promise<Figures> => {
  const dir = mkdtempSync(join(tmpdir(), "tg-cost-"))
  const { db, wal } = await openStore(dir, SYNC)
  const tally = new Tally()
  timeStatements(db, tally)
  const seal: Sealer["seal"] = (unsigned) => {
    const t0 = performance.now()
    const sealed = tree.seal.sealReceipt(tree.signer, unsigned)
    tally.add("seal (canonical JSON, SHA-256, Ed25519)", t0)
    return sealed
  }
  const ops = tree.tx.makeChatTransactions(db, { keyId: "key_bench", seal })
  // The worker's own group commit, `--batch` calls per COMMIT (1: one caller): a plain reservation
  // commits unsynced (its level lowered to NORMAL for that COMMIT), the settlement synced, as `mustSync` says.
  const group = tree.sync.makeGroupCommit(db)
  let reserveCpu = 0
  let settleCpu = 0
  let reserveWall = 0
  let settleWall = 0
  let sys = 0
  // One batch: `calls`' transactions of one kind submitted together and committed by one flush, as
  // the worker commits the calls of one message; CPU and wall shared out evenly.
  const transact = <A>(op: "reserve" | "settle", calls: ReadonlyArray<{ args: unknown; body: () => A }>): { values: Array<A>; cpu: number; wall: number } => {
    const c0 = process.cpuUsage()
    const t0 = performance.now()
    const outcomes: Array<TxOutcome> = []
    for (const c of calls) group.submit(c.body, (o) => void outcomes.push(o), tree.tx.mustSync(op, c.args))
    group.flush()
    const wall = (performance.now() - t0) * 1000
    const cpu = process.cpuUsage(c0)
    sys += cpu.system
    const failed = outcomes.find((o) => o._tag !== "Committed")
    if (failed !== undefined || outcomes.length !== calls.length) throw new Error(`${op} did not commit: ${JSON.stringify(failed)}`)
    return { values: outcomes.map((o) => (o as Extract<TxOutcome, { _tag: "Committed" }>).value as A), wall, cpu: cpu.user + cpu.system }
  }
  const run = (n: number) => {
    for (let i = 0; i < n; i += BATCH) {
      const now = Date.now()
      const calls = Array.from({ length: Math.min(BATCH, n - i) }, (_, j) => callArgs(i + j, now))
      const r = transact("reserve", calls.map((c) => ({ args: c.reserve, body: () => ops.reserve(c.reserve, refuse).reservation })))
      const settles = calls.map((c, j) => c.settle(r.values[j]!))
      const s = transact("settle", settles.map((settle) => ({ args: settle, body: () => ops.settle(settle) })))
      reserveCpu += r.cpu
      reserveWall += r.wall
      settleCpu += s.cpu
      settleWall += s.wall
    }
  }
  run(300) // warm-up: JIT, the B-trees past their first pages
  reserveCpu = settleCpu = reserveWall = settleWall = sys = 0
  tally.on = true
  run(CALLS)
  tally.on = false
  const figures = { reserveCpu: reserveCpu / CALLS, settleCpu: settleCpu / CALLS, sys: sys / CALLS, reserveWall: reserveWall / CALLS, settleWall: settleWall / CALLS }
  // Frames: an empty WAL and no checkpoint, so the file's growth over the calls is every frame they wrote.
  db.pragma("wal_checkpoint(TRUNCATE)")
  db.pragma("wal_autocheckpoint = 0")
  run(FRAME_CALLS)
  const frames = statSync(wal).size / FRAME_BYTES / FRAME_CALLS
  db.close()
  rmSync(dir, { recursive: true, force: true })
  const parts = new Map([...tally.ms].map(([k, ms]) => [k, (ms * 1000) / CALLS]))
  return { ...figures, parts, frames }
}

const results = new Map<string, Array<Figures>>()
for (let round = 0; round < ROUNDS; round++) {
  for (const tree of round % 2 === 0 ? trees : [...trees].reverse()) {
    results.set(tree.name, [...(results.get(tree.name) ?? []), await measure(tree)])
  }
}

/** Median (min–max) over the runs. */
const cell = (xs: ReadonlyArray<number>) => {
  const [lo, hi] = spread(xs)
  return `${median(xs).toFixed(1)} (${lo.toFixed(0)}–${hi.toFixed(0)})`
}
console.log(`\n${CALLS} governed calls per round, ${ROUNDS} rounds, synchronous=${SYNC}, ${BATCH} call(s) per COMMIT (reservations unsynced); µs per call, median (min–max over rounds)\n`)
console.log(`| | ${trees.map((t) => t.name).join(" | ")} |`)
console.log(`| --- | ${trees.map(() => "---:").join(" | ")} |`)
const row = (label: string, f: (r: Figures) => number | undefined) =>
  console.log(`| ${label} | ${trees.map((t) => cell(results.get(t.name)!.map((r) => f(r) ?? 0))).join(" | ")} |`)
row("reserve CPU (BEGIN … COMMIT)", (r) => r.reserveCpu)
row("settle CPU (BEGIN … COMMIT)", (r) => r.settleCpu)
row("reserve + settle CPU", (r) => r.reserveCpu + r.settleCpu)
row("of which in statements and seal (wall)", (r) => [...r.parts.values()].reduce((a, b) => a + b, 0))
row("of which kernel (write, fsync)", (r) => r.sys)
row("reserve wall", (r) => r.reserveWall)
row("settle wall", (r) => r.settleWall)
console.log(`| WAL frames per call (4 KiB pages; ${FRAME_CALLS} more calls, auto-checkpoints off) | ${trees.map((t) => median(results.get(t.name)!.map((r) => r.frames)).toFixed(2)).join(" | ")} |`)
const labels = [...new Set(trees.flatMap((t) => results.get(t.name)!.flatMap((r) => [...r.parts.keys()])))]
const byCost = labels.sort((a, b) => median(results.get("this")!.map((r) => r.parts.get(b) ?? 0)) - median(results.get("this")!.map((r) => r.parts.get(a) ?? 0)))
console.log(`\nPer statement (wall µs per call, the statement's run/get/all; BEGIN, COMMIT and the bodies' own JS are the rest)\n`)
console.log(`| statement | ${trees.map((t) => t.name).join(" | ")} |`)
console.log(`| --- | ${trees.map(() => "---:").join(" | ")} |`)
for (const label of byCost) row(label, (r) => r.parts.get(label))
