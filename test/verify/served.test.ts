/**
 * `tollgate verify` on what a real gateway serves (SQLite, calls by the official openai client): the
 * export of GET /v1/receipts, a checkpoint of GET /v1/receipts/checkpoint, the keys of
 * GET /v1/receipts/keys and the cards of GET /v1/rate_cards, verified by the real CLI offline — no
 * findings; the same export with one charge edited (receipt_hash_mismatch at it), or a receipt left out
 * (chain_gap after it, and the kept checkpoint of 6 receipts beyond the export of 5), exits 1.
 */
import { execFile } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { useMockedGateway } from "../support/gateway.ts"
import { clientFor, newProject, raw } from "../e2e/helpers.ts"

process.env.TOLLGATE_CHECKPOINT_INTERVAL_MS = "100"
const t = useMockedGateway({ beforeAll, afterAll })
const dir = mkdtempSync(join(tmpdir(), "tollgate-verify-served-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const text = async (path: string, key: string): Promise<string> => {
  const res = await raw(t.gateway, path, { key })
  expect(res.status, path).toBe(200)
  return res.text()
}

const verify = (args: ReadonlyArray<string>): Promise<{ code: number; out: { findings: number; findings_listed: Array<{ kind: string; subject: string }> } }> =>
  new Promise((resolve) =>
    execFile(process.execPath, ["bin/tollgate.mjs", "verify", ...args, "--json"], { cwd: process.cwd() }, (err, stdout) =>
      resolve({ code: err === null ? 0 : (err.code as number), out: JSON.parse(stdout) })
    )
  )

describe("tollgate verify on a served export", { timeout: 120_000 }, () => {
  it("the export, a checkpoint, the keys and the rate cards as served verify clean; an edited charge and a left-out receipt do not", async () => {
    const { key } = await newProject(t.gateway, { name: "verify-served" })
    const client = clientFor(t.gateway, key)
    for (let i = 0; i < 6; i++) await client.chat.completions.create({ model: "gpt-test", messages: [{ role: "user", content: `call ${i}` }], max_tokens: 8 })
    let checkpoint = ""
    for (let i = 0; i < 600 && checkpoint.split("\n")[1] !== "6"; i++) {
      const res = await raw(t.gateway, "/v1/receipts/checkpoint", { key })
      checkpoint = res.status === 200 ? await res.text() : (await res.text(), "")
      if (checkpoint.split("\n")[1] !== "6") await new Promise((r) => setTimeout(r, 50))
    }
    const files = {
      export: join(dir, "export.jsonl"),
      checkpoints: join(dir, "checkpoints.txt"),
      keys: join(dir, "keys.json"),
      cards: join(dir, "rate_cards.json")
    }
    const exported = await text("/v1/receipts", key)
    writeFileSync(files.export, exported)
    writeFileSync(files.checkpoints, checkpoint)
    writeFileSync(files.keys, await text("/v1/receipts/keys", key))
    writeFileSync(files.cards, await text("/v1/rate_cards", key))
    const kept = ["--checkpoints", files.checkpoints, "--keys", files.keys, "--rate-cards", files.cards]

    const clean = await verify([files.export, ...kept])
    expect(clean.out.findings_listed).toEqual([])
    expect(clean.code).toBe(0)
    // The served export carries the rate cards in its header: the export alone recomputes every charge.
    const alone = await verify([files.export])
    expect(alone.out.findings_listed).toEqual([])
    expect(alone.code).toBe(0)
    expect((JSON.parse(exported.split("\n")[0]!) as { rate_cards?: ReadonlyArray<unknown> }).rate_cards?.length).toBeGreaterThan(0)

    const lines = exported.trimEnd().split("\n")
    expect(lines.length).toBe(7)
    const third = JSON.parse(lines[3]!) as { receipt_id: string; credits_charged: number }
    const edited = join(dir, "edited.jsonl")
    writeFileSync(edited, `${lines.map((l, i) => (i === 3 ? l.replace(`"credits_charged":${third.credits_charged}`, `"credits_charged":${third.credits_charged + 1}`) : l)).join("\n")}\n`)
    const e = await verify([edited, ...kept])
    expect(e.code).toBe(1)
    expect(e.out.findings_listed).toContainEqual(expect.objectContaining({ kind: "receipt_hash_mismatch", subject: third.receipt_id }))

    const removed = join(dir, "removed.jsonl")
    writeFileSync(removed, `${lines.filter((_, i) => i !== 3).join("\n")}\n`)
    const r = await verify([removed, ...kept])
    expect(r.code).toBe(1)
    expect(r.out.findings_listed.map((f) => f.kind)).toEqual(["chain_gap", "export_truncated"])
  })
})
