/**
 * `tollgate verify` on tampered exports (issue 43, item 4): the real CLI (bin/tollgate.mjs) as a child
 * process, on files written here from a chain sealed with the gateway's own sealing code
 * (./exportFixture.ts), each run twice: signatures checked on the main thread and by two workers. The untouched export, with its checkpoints and statement, exits 0; each
 * tampering is named by the finding kind the verifier gives it, with exit code 1.
 */
import { execFile } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { statementFromReceipts } from "../../spec/statement.ts"
import { checkpointOf, chainBodies, exportHeader, makeKey, statementOf } from "./exportFixture.ts"

const N = 40
const dir = mkdtempSync(join(tmpdir(), "tollgate-verify-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const key = makeKey()
const chain = [...chainBodies({ key, count: N })]
const bodies = chain.map((c) => c.body)
const hashes = chain.map((c) => c.hash)
const checkpoints = [10, 30, N].map((size) => checkpointOf(key, hashes, size)).join("\n")
const statement = statementOf(key, statementFromReceipts(chain.map((c) => c.unsigned)), hashes)

const file = (name: string, text: string): string => {
  const path = join(dir, name)
  writeFileSync(path, text)
  return path
}
const exportFile = (name: string, lines: ReadonlyArray<string>): string => file(name, [exportHeader(key), ...lines].map((l) => `${l}\n`).join(""))
const checkpointsFile = file("checkpoints.txt", checkpoints)
const statementFile = file("statement.json", JSON.stringify(statement))

interface Run {
  readonly code: number
  readonly stdout: string
  readonly kinds: ReadonlyArray<string>
  readonly subjects: ReadonlyArray<string>
}

/** The CLI on `args`, with every signature checked on its main thread (--jobs 0) and by two workers: the same findings either way. */
const verify = async (args: ReadonlyArray<string>): Promise<Run> => {
  const [alone, pooled] = await Promise.all([verifyWith([...args, "--jobs", "0"]), verifyWith([...args, "--jobs", "2"])])
  expect(pooled.code).toBe(alone.code)
  expect(JSON.parse(pooled.stdout).findings_listed).toEqual(JSON.parse(alone.stdout).findings_listed)
  return alone
}

const verifyWith = (args: ReadonlyArray<string>): Promise<Run> =>
  new Promise((resolve) =>
    execFile(process.execPath, ["bin/tollgate.mjs", "verify", ...args, "--json"], { cwd: process.cwd() }, (err, stdout) => {
      const out = JSON.parse(stdout) as { findings_listed: ReadonlyArray<{ kind: string; subject: string }> }
      resolve({
        code: err === null ? 0 : (err.code as number),
        stdout,
        kinds: [...new Set(out.findings_listed.map((f) => f.kind))].sort(),
        subjects: out.findings_listed.map((f) => f.subject)
      })
    })
  )

const withKept = (path: string) => [path, "--checkpoints", checkpointsFile, "--statement", statementFile]

/** A receipt body with one top-level number member changed (the body stays canonical). */
const edit = (body: string, member: string, to: number): string => body.replace(new RegExp(`"${member}":\\d+`), `"${member}":${to}`)

describe("tollgate verify: an untouched export and each tampering", { timeout: 60_000 }, () => {
  it("the untouched export, its checkpoints and its statement: exit 0, no findings", async () => {
    const run = await verify(withKept(exportFile("clean.jsonl", bodies)))
    expect(run.kinds).toEqual([])
    expect(run.code).toBe(0)
    // and in the human form, the summary of what was checked
    const human = await new Promise<string>((resolve) =>
      execFile(process.execPath, ["bin/tollgate.mjs", "verify", ...withKept(join(dir, "clean.jsonl"))], { cwd: process.cwd() }, (_e, stdout) => resolve(stdout))
    )
    expect(human).toContain(`checked: ${N} receipts in 1 page(s), 1 public key(s) (from the export), 1 rate card(s), 4 checkpoint(s), 1 statement(s)`)
    expect(human).toContain("CLEAN: no findings.")
  })

  it("a charge edited: receipt_hash_mismatch at that receipt, and the statement no longer sums", async () => {
    const at = 17
    const lines = bodies.map((b, i) => (i === at ? edit(b, "credits_charged", JSON.parse(b).credits_charged + 1) : b))
    const run = await verify(withKept(exportFile("charge.jsonl", lines)))
    expect(run.code).toBe(1)
    expect(run.kinds).toContain("receipt_hash_mismatch")
    expect(run.subjects).toContain(JSON.parse(bodies[at]!).receipt_id)
    expect(run.kinds).toContain("statement_mismatch")
  })

  it("a charge edited and re-sealed by the operator's key: the recomputed charge names it (charge_mismatch)", async () => {
    // The operator holds the key: a wrong charge can be signed. The rate card still catches it.
    const honest = chain[5]!.unsigned
    const resealed = [...chainBodies({ key, count: N })].map((c) => c.body)
    const { fastestSealer } = await import("../../src/store/sodium.ts")
    const { GENESIS_HASH } = await import("../../spec/receipt.ts")
    // re-seal the whole chain with receipt 6 overcharged, so every hash and link is honest
    let prev = GENESIS_HASH
    const seal = fastestSealer(key.privateKey)
    const lines = chain.map((c) => {
      const unsigned = { ...c.unsigned, prev_hash: prev, credits_charged: c.unsigned.seq === honest.seq ? c.unsigned.credits_charged + 5 : c.unsigned.credits_charged }
      const s = seal(unsigned)
      prev = s.receipt.hash
      return s.body
    })
    expect(resealed).toEqual(bodies)
    const run = await verify([exportFile("overcharged.jsonl", lines)])
    expect(run.code).toBe(1)
    expect(run.kinds).toEqual(["charge_mismatch"])
    expect(run.subjects).toEqual([honest.receipt_id])
  })

  it("a receipt removed from the middle: chain_gap at the receipt after it, and the kept checkpoint's root differs", async () => {
    const lines = bodies.filter((_, i) => i !== 20)
    const run = await verify(withKept(exportFile("removed.jsonl", lines)))
    expect(run.code).toBe(1)
    expect(run.kinds).toContain("chain_gap")
    expect(run.subjects).toContain(JSON.parse(bodies[21]!).receipt_id)
    expect(run.kinds).toContain("export_truncated")
    expect(run.kinds).toContain("statement_mismatch")
  })

  it("a receipt removed from the middle, the rest re-sealed into a clean chain: only the kept checkpoints catch it", async () => {
    // Another history: honest links, honest signatures, one receipt fewer. Same size as a split view's.
    const other = [...chainBodies({ key, count: N - 1, skip: 21 })].map((c) => c.body)
    expect(other.slice(0, 20)).toEqual(bodies.slice(0, 20))
    const run = await verify([exportFile("resealed.jsonl", other), "--checkpoints", checkpointsFile])
    expect(run.code).toBe(1)
    expect(run.kinds).toEqual(["checkpoint_mismatch", "export_truncated"])
  })

  it("two exports of the same size with different roots: the one that is not the kept checkpoint's history is a checkpoint_mismatch", async () => {
    const fork = [...chainBodies({ key, count: N, variant: 1 })].map((c) => c.body)
    const kept = file("kept.txt", checkpointOf(key, hashes, N))
    const mine = await verify([exportFile("history-a.jsonl", bodies), "--checkpoints", kept])
    const theirs = await verify([exportFile("history-b.jsonl", fork), "--checkpoints", kept])
    expect(mine.code).toBe(0)
    expect(theirs.code).toBe(1)
    expect(theirs.kinds).toEqual(["checkpoint_mismatch"])
    expect(theirs.subjects).toEqual(["checkpoint 1 (size 40)"])
    // and the two signed checkpoints of one size together are a split view
    const forkHashes = [...chainBodies({ key, count: N, variant: 1 })].map((c) => c.hash)
    const both = file("both.txt", `${checkpointOf(key, hashes, N)}\n${checkpointOf(key, forkHashes, N)}`)
    const split = await verify([exportFile("history-a2.jsonl", bodies), "--checkpoints", both])
    expect(split.kinds).toEqual(["checkpoint_conflict", "checkpoint_mismatch"])
    expect(split.code).toBe(1)
  })

  it("a statement total off by one: statement_mismatch naming the field, and statement_invalid (its signature no longer covers it)", async () => {
    const off = file("statement-off.json", JSON.stringify({ ...statement, spent: statement.spent + 1 }))
    const run = await verify([exportFile("for-statement.jsonl", bodies), "--statement", off])
    expect(run.code).toBe(1)
    expect(run.kinds).toEqual(["statement_invalid", "statement_mismatch"])
    expect(run.subjects).toContain("2026-11/spent")
  })

  it("a reordered pair: chain_order at the receipt that comes after its successor, and the checkpoint's root differs", async () => {
    const lines = [...bodies]
    ;[lines[11], lines[12]] = [lines[12]!, lines[11]!]
    const run = await verify(withKept(exportFile("reordered.jsonl", lines)))
    expect(run.code).toBe(1)
    expect(run.kinds).toContain("chain_order")
    expect(run.subjects).toContain(JSON.parse(bodies[11]!).receipt_id)
    expect(run.kinds).toContain("checkpoint_mismatch")
    expect(run.kinds).not.toContain("statement_mismatch")
  })

  it("a bad signature: signature_invalid at that receipt", async () => {
    const at = 30
    const sig = JSON.parse(bodies[at]!).signature as string
    const flipped = (sig[5] === "A" ? "B" : "A") + ""
    const lines = bodies.map((b, i) => (i === at ? b.replace(sig, sig.slice(0, 5) + flipped + sig.slice(6)) : b))
    const run = await verify(withKept(exportFile("badsig.jsonl", lines)))
    expect(run.code).toBe(1)
    expect(run.kinds).toEqual(["signature_invalid"])
    expect(run.subjects).toEqual([JSON.parse(bodies[at]!).receipt_id])
  })

  it("pinned keys that do not include the signer: signing_key_unknown for every receipt", async () => {
    const other = makeKey()
    const keys = file("keys.json", JSON.stringify({ object: "list", data: [other.entry] }))
    const run = await verify([exportFile("pinned.jsonl", bodies.slice(0, 3)), "--keys", keys])
    expect(run.code).toBe(1)
    expect(run.kinds).toEqual(["signing_key_unknown"])
    expect(run.subjects.length).toBe(3)
  })
})
