/**
 * `npx tsx bench/scopes.ts [--n 5000] [--rounds 6]` (issue 41): what holding a call in its key's and
 * its end user's scopes (migration 0014) adds to the store's CPU for one governed call on SQLite —
 * the reservation (claim, sizing on every scope's window, the guarded statements, the pending row, the
 * hold) and the settlement (the charge posted to every scope, the signed receipt, the stored reply) —
 * as the store worker runs them (src/store/chatTransactions.ts). Stores migrated alike: calls
 * with no key or end user on the hold (the path before issue 41), and calls held in a capped key and
 * one of 50 capped end users; and between them the path of a call with no key or end-user budget set
 * since issue 41 (its key held uncapped, no end user named). CPU µs a call, the stores interleaved round by round, synchronous=OFF
 * (CPU, not the disk). A benchmark: printed, never asserted.
 */
import { generateKeyPairSync } from "node:crypto"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { sealReceipt } from "../spec/receipt.ts"
import { makeChatTransactions } from "../src/store/chatTransactions.ts"
import { numArg } from "./lib/args.ts"
import { callArgs, openStore, refuse } from "./lib/governedCalls.ts"

const n = numArg("--n", 5_000)
const rounds = numArg("--rounds", 6)
/** Calls a commit carries, as the store worker's group commit batches them under load (each call its own savepoint). */
const batch = numArg("--batch", 1)
const { privateKey } = generateKeyPairSync("ed25519")
const sealer = { keyId: "rk_bench", seal: (u: Parameters<typeof sealReceipt>[1]) => sealReceipt(privateKey, u) }

type Variant = "none" | "key" | "both"
const store = async (name: string, variant: Variant) => {
  const { db } = await openStore(mkdtempSync(join(tmpdir(), "tollgate-scopes-")), "OFF")
  // The key uncapped in the "key" variant (every call is held in its key since issue 41), capped in "both".
  db.prepare("INSERT INTO api_keys (id, project_id, environment, secret_sha256, created_at, budget_credits) VALUES ('key_bench', 'prj_bench', 'production', 'x', 0, ?)").run(variant === "both" ? 1e15 : null)
  if (variant === "both") db.prepare("UPDATE projects SET end_user_budget_credits = 1000000000000000").run()
  const tx = makeChatTransactions(db, sealer)
  const reserve = db.transaction((a: Parameters<typeof tx.reserve>[0]) => tx.reserve(a, refuse))
  const settle = db.transaction((a: Parameters<typeof tx.settle>[0]) => tx.settle(a))
  let i = 0
  const extraOf = (j: number) => (variant === "none" ? {} : variant === "key" ? { keyId: "key_bench" } : { keyId: "key_bench", endUser: `user-${j % 50}` })
  // A group of calls: their reservations in one commit, then their settlements in one commit.
  const group = db.transaction((calls: ReadonlyArray<{ j: number; c: ReturnType<typeof callArgs> }>) =>
    calls.map(({ j, c }) => reserve({ ...c.reserve, hold: { ...c.reserve.hold, ...extraOf(j) } }).reservation)
  )
  const settleGroup = db.transaction((calls: ReadonlyArray<{ j: number; c: ReturnType<typeof callArgs> }>, amounts: ReadonlyArray<number>) =>
    calls.forEach(({ j, c }, k) => {
      const s = c.settle(amounts[k]!)
      settle({ ...s, hold: { ...s.hold, ...extraOf(j) } })
    })
  )
  const run = () => {
    for (let k = 0; k < n; k += batch) {
      const calls = Array.from({ length: Math.min(batch, n - k) }, () => ({ j: i, c: callArgs(i, Date.UTC(2026, 10, 15) + i++) }))
      settleGroup(calls, group(calls))
    }
  }
  return { name, run }
}

const stores = [
  await store("project only (before issue 41)", "none"),
  await store("project + uncapped key, no end user (no budgets set)", "key"),
  await store("project + key + end user, all capped", "both")
]
const cpu = new Map<string, number>()
for (let r = 0; r < rounds; r++) {
  for (const s of r % 2 === 0 ? stores : [...stores].reverse()) {
    const before = process.cpuUsage()
    s.run()
    const used = process.cpuUsage(before)
    cpu.set(s.name, (cpu.get(s.name) ?? 0) + used.user + used.system)
  }
}
const base = (cpu.get(stores[0]!.name) ?? 0) / (rounds * n)
console.log(`| one governed call's store transactions, SQLite (${rounds} × ${n}, ${batch} a commit) | CPU µs a call | vs project only |`)
console.log("| --- | ---: | ---: |")
for (const s of stores) {
  const perCall = (cpu.get(s.name) ?? 0) / (rounds * n)
  console.log(`| ${s.name} | ${perCall.toFixed(1)} | ${((perCall / base - 1) * 100).toFixed(1)} % |`)
}
