/**
 * Issue 38, finding 2's class (a write that fails leaves nothing behind): rotations of one key that
 * race. Each reads the key as active before any writes; the transaction's guarded UPDATE
 * (src/services/KeyRegistry.ts `rotate`) lets one claim it, and the others write nothing and answer
 * 409. Unguarded, PostgreSQL committed all eight: eight replacements, seven of them orphans.
 *
 * On PostgreSQL (the e2e-pg project) another session holds the key's row while the rotations arrive,
 * so that every one of them has read it as active and waits at its UPDATE; SQLite runs one statement
 * at a time on one connection, so there they meet the same guard one after the other.
 */
import { execFileSync, spawn } from "node:child_process"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { useMockedGateway } from "../support/gateway.ts"

describe("rotations racing on one key", () => {
  const env = useMockedGateway({ beforeAll, afterAll })

  /** PostgreSQL: run `statement` in a transaction of its own session and keep it open for `ms`; `held` once it sleeps. */
  const holdInTransaction = (statement: string, ms: number) => {
    const tag = `tollgate_hold_${Date.now()}`
    const session = spawn("psql", [env.gateway.databaseUrl, "-X", "-q", "-v", "ON_ERROR_STOP=1"], { stdio: ["pipe", "ignore", "inherit"] })
    session.stdin.end(`BEGIN;\n${statement};\nSELECT pg_sleep(${ms / 1000}) AS ${tag};\nCOMMIT;\n`)
    const done = new Promise<void>((resolve) => session.once("exit", () => resolve()))
    const sleeping = () =>
      execFileSync("psql", [env.gateway.databaseUrl, "-X", "-At", "-c", `SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%AS ${tag}%' AND pid <> pg_backend_pid()`], {
        encoding: "utf8"
      }).trim() === "1"
    const held = (async () => {
      while (!sleeping()) await new Promise((r) => setTimeout(r, 20))
    })()
    return { held, done }
  }

  it("eight at once: one 201, seven 409, exactly one replacement written", async () => {
    const project = await env.gateway.admin("POST", "/admin/v1/projects", { name: "race", budget_credits: 1_000, rate_limit: { requests_per_minute: 60 } })
    const key = await env.gateway.admin("POST", `/admin/v1/projects/${project.body.id}/keys`, { environment: "development" })
    const keyId = key.body.id as string
    const lock = env.gateway.engine === "pg" ? holdInTransaction(`SELECT 1 FROM api_keys WHERE id = '${keyId}' FOR UPDATE`, 1_000) : undefined
    await lock?.held
    const answers = await Promise.all(Array.from({ length: 8 }, () => env.gateway.admin("POST", `/admin/v1/keys/${keyId}/rotate`, { grace_seconds: 60 })))
    await lock?.done
    expect(answers.map((a) => a.status).sort()).toEqual([201, ...Array(7).fill(409)])
    const keys = await env.gateway.admin("GET", `/admin/v1/projects/${project.body.id}/keys`)
    const winner = answers.find((a) => a.status === 201)!.body
    expect(keys.body.data.map((k: { id: string }) => k.id)).toEqual([keyId, winner.id])
    expect(keys.body.data[0]).toMatchObject({ status: "rotated", replaced_by: winner.id })
  })
})
