/**
 * Issue 38, findings 2 and 7: every field an admin sends is bounded where it is decoded (the admin
 * payload schemas, src/domain/adminFields.ts), a refused one is a 400 naming it, and a write that fails
 * leaves nothing behind — a far-future `grace_seconds` once committed half a rotation (the new key,
 * its secret never shown) and left the project unreadable.
 */
import Database from "better-sqlite3"
import { execFileSync } from "node:child_process"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { MAX_BUDGET_CREDITS, MAX_BURST, MAX_GRACE_SECONDS, MAX_NAME_LENGTH, MAX_REQUESTS_PER_MINUTE } from "../../src/domain/adminFields.ts"
import { useMockedGateway } from "../support/gateway.ts"

describe("admin fields are bounded where they are decoded (issue 38, findings 2 and 7)", () => {
  const env = useMockedGateway({ beforeAll, afterAll })
  const admin = (method: string, path: string, body?: unknown) => env.gateway.admin(method, path, body)
  const validProject = { name: "bounded", budget_credits: 1_000, rate_limit: { requests_per_minute: 60 } }

  /** A project with one development key: its id and the key's id. */
  const projectWithKey = async () => {
    const project = await admin("POST", "/admin/v1/projects", validProject)
    expect(project.status).toBe(201)
    const key = await admin("POST", `/admin/v1/projects/${project.body.id}/keys`, { environment: "development" })
    expect(key.status).toBe(201)
    return { projectId: project.body.id as string, keyId: key.body.id as string }
  }

  /** The project as GET reads it, and its keys as the key list reads them (both must answer 200). */
  const readBack = async (projectId: string) => {
    const project = await admin("GET", `/admin/v1/projects/${projectId}`)
    const keys = await admin("GET", `/admin/v1/projects/${projectId}/keys`)
    expect([project.status, keys.status]).toEqual([200, 200])
    return { project: project.body, keys: keys.body.data as Array<{ id: string; status: string; expires_at: string | null }> }
  }

  /** Write to the store behind the gateway's back: a row an earlier version wrote. */
  const plant = (statement: string) => {
    if (env.gateway.engine === "pg") {
      execFileSync("psql", [env.gateway.databaseUrl, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", statement])
      return
    }
    const db = new Database(env.gateway.dbPath)
    try {
      db.exec(statement)
    } finally {
      db.close()
    }
  }

  const expectRefused = (res: { status: number; body: any }, param: string, what: string) => {
    expect([what, res.status, res.body.error?.type, res.body.error?.param]).toEqual([what, 400, "invalid_request_error", param])
  }

  it("grace_seconds beyond a year is a 400 naming it, and nothing is written: the keys, the project and the old key's revoke still answer", async () => {
    const { projectId, keyId } = await projectWithKey()
    const before = await readBack(projectId)
    for (const grace of [10_000_000_000_000, MAX_GRACE_SECONDS + 1, -1, 1.5, 1e308]) {
      expectRefused(await admin("POST", `/admin/v1/keys/${keyId}/rotate`, { grace_seconds: grace }), "grace_seconds", String(grace))
    }
    const finding = await admin("POST", `/admin/v1/keys/${keyId}/rotate`, { grace_seconds: 10_000_000_000_000 })
    expect(finding.body.error.message).toBe("Invalid grace_seconds: Expected an integer from 0 to 31536000, actual 10000000000000")
    const after = await readBack(projectId)
    expect(after.keys).toEqual(before.keys)
    expect(after.keys.find((k) => k.id === keyId)?.status).toBe("active")

    const longest = await admin("POST", `/admin/v1/keys/${keyId}/rotate`, { grace_seconds: MAX_GRACE_SECONDS })
    expect(longest.status).toBe(201)
    expect(Date.parse(longest.body.old_key_expires_at) - Date.parse(longest.body.created_at)).toBe(MAX_GRACE_SECONDS * 1000)
    expect((await readBack(projectId)).keys.map((k) => k.status)).toEqual(["rotated", "active"])
    expect((await admin("POST", `/admin/v1/keys/${keyId}/revoke`)).status).toBe(200)
  })

  it("budget_credits and the rate limit are bounded on create and on update; the bounds themselves are accepted", async () => {
    const refusedCreates: Array<[unknown, string]> = [
      [{ ...validProject, budget_credits: MAX_BUDGET_CREDITS + 1 }, "budget_credits"],
      [{ ...validProject, budget_credits: 1e300 }, "budget_credits"],
      [{ ...validProject, budget_credits: -1 }, "budget_credits"],
      [{ ...validProject, rate_limit: { requests_per_minute: 0 } }, "rate_limit.requests_per_minute"],
      [{ ...validProject, rate_limit: { requests_per_minute: MAX_REQUESTS_PER_MINUTE + 1 } }, "rate_limit.requests_per_minute"],
      [{ ...validProject, rate_limit: { requests_per_minute: 60, burst: 0 } }, "rate_limit.burst"],
      [{ ...validProject, rate_limit: { requests_per_minute: 60, burst: MAX_BURST + 1 } }, "rate_limit.burst"]
    ]
    const count = (await admin("GET", "/admin/v1/projects")).body.data.length
    for (const [body, param] of refusedCreates) expectRefused(await admin("POST", "/admin/v1/projects", body), param, JSON.stringify(body))
    expect((await admin("GET", "/admin/v1/projects")).body.data.length).toBe(count)

    const { projectId } = await projectWithKey()
    const before = (await readBack(projectId)).project
    const refusedPatches: Array<[unknown, string]> = [
      [{ budget_credits: MAX_BUDGET_CREDITS + 1 }, "budget_credits"],
      [{ budget_credits: -5 }, "budget_credits"],
      [{ rate_limit: { requests_per_minute: MAX_REQUESTS_PER_MINUTE + 1 } }, "rate_limit.requests_per_minute"],
      [{ rate_limit: { burst: MAX_BURST + 1 } }, "rate_limit.burst"],
      [{ rate_limit: { burst: -1 } }, "rate_limit.burst"],
      [{ name: "" }, "name"],
      [{ name: "   " }, "name"],
      [{ name: "fine", budget_credits: 2 ** 60 }, "budget_credits"]
    ]
    for (const [body, param] of refusedPatches) expectRefused(await admin("PATCH", `/admin/v1/projects/${projectId}`, body), param, JSON.stringify(body))
    expect((await readBack(projectId)).project).toEqual(before)

    const largest = { name: "largest", budget_credits: MAX_BUDGET_CREDITS, rate_limit: { requests_per_minute: MAX_REQUESTS_PER_MINUTE, burst: MAX_BURST } }
    const created = await admin("POST", "/admin/v1/projects", largest)
    expect(created.status).toBe(201)
    expect(created.body).toMatchObject(largest)
    expect((await readBack(created.body.id)).project.current_window.remaining).toBe(MAX_BUDGET_CREDITS)
  })

  it("a project name is 1–200 characters once trimmed, without control characters, well-formed; stored trimmed", async () => {
    const refused: Array<[string, string]> = [
      ["   \t ", "whitespace only"],
      ["a\u0000b", "NUL"],
      ["a\u0007b", "a control character"],
      ["line\nbreak", "a line break"],
      ["lone \ud800 surrogate", "a lone high surrogate"],
      ["\udfff", "a lone low surrogate"],
      ["x".repeat(MAX_NAME_LENGTH + 1), "201 characters"],
      ["x".repeat(1_000_000), "a million characters"]
    ]
    for (const [name, what] of refused) {
      expectRefused(await admin("POST", "/admin/v1/projects", { ...validProject, name }), "name", what)
    }
    const emoji = await admin("POST", "/admin/v1/projects", { ...validProject, name: "🦀".repeat(MAX_NAME_LENGTH) })
    expect(emoji.status, "200 characters of two UTF-16 units each").toBe(201)
    const padded = await admin("POST", "/admin/v1/projects", { ...validProject, name: `  Team Ünïcode 漢字 👩‍💻  ` })
    expect([padded.status, padded.body.name]).toEqual([201, "Team Ünïcode 漢字 👩‍💻"])
    const renamed = await admin("PATCH", `/admin/v1/projects/${padded.body.id}`, { name: " renamed " })
    expect([renamed.status, renamed.body.name]).toEqual([200, "renamed"])
    expectRefused(await admin("PATCH", `/admin/v1/projects/${padded.body.id}`, { name: "bad\u0000" }), "name", "NUL on update")
  })

  it("organization matches org_ then 1–60 of a-z, 0-9, _ and -", async () => {
    for (const organization of ["", "<x>", "org_", "org", "ORG_ACME", "org_Acme", "org_acme corp", `org_${"a".repeat(61)}`, "org_\u0000", 7]) {
      expectRefused(await admin("POST", "/admin/v1/projects", { ...validProject, organization }), "organization", JSON.stringify(organization))
    }
    for (const organization of ["org_acme", "org_acme-eu_1", `org_${"a".repeat(60)}`, "org_default"]) {
      const res = await admin("POST", "/admin/v1/projects", { ...validProject, organization })
      expect([res.status, res.body.organization]).toEqual([201, organization])
    }
    const generated = await admin("POST", "/admin/v1/projects", validProject)
    expect(generated.body.organization).toMatch(/^org_[a-z2-7]{20}$/)
  })

  it("a row an earlier version wrote with an expiry beyond the Date range still reads, lists and revokes", async () => {
    const { projectId, keyId } = await projectWithKey()
    // What the bug wrote (now + 10^16 ms); PostgreSQL's driver refuses a BIGINT past 2^53 outright,
    // so there the row is one past the Date range but within it.
    const expiry = env.gateway.engine === "pg" ? 9_000_000_000_000_000 : 10_001_777_000_000_000
    plant(`UPDATE api_keys SET expires_at = ${expiry}, replaced_by = 'key_lost' WHERE id = '${keyId}'`)
    const { keys } = await readBack(projectId)
    expect(keys[0]).toMatchObject({ id: keyId, status: "rotated", expires_at: "+275760-09-13T00:00:00.000Z" })
    const revoked = await admin("POST", `/admin/v1/keys/${keyId}/revoke`)
    expect([revoked.status, revoked.body.status]).toEqual([200, "revoked"])
  })

  it("the OpenAPI document carries the bounds", async () => {
    const doc: any = await (await fetch(`${env.gateway.origin}/openapi.json`)).json()
    const payload = (path: string, method: string) => doc.paths[path][method].requestBody.content["application/json"].schema
    const create = payload("/admin/v1/projects", "post")
    expect(create.properties.budget_credits).toMatchObject({ minimum: 0, maximum: MAX_BUDGET_CREDITS })
    expect(create.properties.name).toMatchObject({ maxLength: MAX_NAME_LENGTH, pattern: expect.any(String) })
    expect(create.properties.organization).toMatchObject({ pattern: expect.stringMatching(/^\^org_/) })
    expect(create.properties.rate_limit.properties.requests_per_minute).toMatchObject({ minimum: 1, maximum: MAX_REQUESTS_PER_MINUTE })
    expect(create.properties.rate_limit.properties.burst).toMatchObject({ minimum: 1, maximum: MAX_BURST })
    expect(payload("/admin/v1/projects/{id}", "patch").properties.budget_credits).toMatchObject({ maximum: MAX_BUDGET_CREDITS })
    expect(payload("/admin/v1/keys/{id}/rotate", "post").properties.grace_seconds).toMatchObject({ minimum: 0, maximum: MAX_GRACE_SECONDS })
  })
})
