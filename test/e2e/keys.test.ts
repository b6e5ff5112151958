/**
 * Key rotation and revocation through the admin API, observed through the OpenAI SDK (docs/contract.md §2):
 * the new key works at once, the old one for its grace period (none with grace_seconds 0), and a
 * revocation takes effect on the very next call through the same instance, even for a cached key.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { clientFor, expectApiError, expectNoServerErrors, governanceOf, newKey, newProject, type StatusLog } from "./helpers.ts"

const unauthorized = { status: 401, code: "invalid_api_key", param: null, noRetry: true } as const

describe("keys: rotation and revocation", () => {
  let mock: MockUpstream
  let gw: TestGateway
  const log: StatusLog = []

  beforeAll(async () => {
    mock = await startMockUpstream()
    // A long key cache: a revocation or rotation must not wait for it to expire.
    gw = await startGateway(mockGatewayFile(mock.url), { keyCacheTtlMs: 60_000 })
  })

  afterAll(async () => {
    expectNoServerErrors(log)
    await gw.close()
    await mock.close()
  })

  const call = (key: string, content = "key check") =>
    clientFor(gw, key, log).chat.completions.create({ model: "auto", messages: [{ role: "user", content }] })

  const keyStatus = async (projectId: string, keyId: string) => {
    const list = await gw.admin("GET", `/admin/v1/projects/${projectId}/keys`)
    expect(list.status).toBe(200)
    return (list.body.data as Array<{ id: string; status: string }>).find((k) => k.id === keyId)?.status
  }

  it("rotation with grace: the new key works at once and the old one keeps working; both act for the same project", async () => {
    const p = await newProject(gw)
    const before = governanceOf(await call(p.key)) // the old key is now cached
    const t0 = Date.now()
    const rotated = await gw.admin("POST", `/admin/v1/keys/${p.keyId}/rotate`, { grace_seconds: 3600 })
    expect(rotated.status).toBe(201)
    expect(rotated.body).toMatchObject({ replaces: p.keyId, environment: "development", project_id: p.projectId })
    expect(rotated.body.id).toMatch(/^key_/)
    expect(rotated.body.id).not.toBe(p.keyId)
    expect(rotated.body.secret).not.toBe(p.key)
    const expiresAt = Date.parse(rotated.body.old_key_expires_at)
    expect(expiresAt).toBeGreaterThanOrEqual(t0 + 3600_000 - 1000)
    expect(expiresAt).toBeLessThanOrEqual(Date.now() + 3600_000 + 1000)

    const viaNew = governanceOf(await call(rotated.body.secret))
    const viaOld = governanceOf(await call(p.key))
    expect(viaNew.status).toBe("completed")
    expect(viaOld.status).toBe("completed")
    // Same tenant: the new key sees what the old key created.
    const seen = (await clientFor(gw, rotated.body.secret, log).get(`/requests/${before.request_id}`)) as { id: string; status: string }
    expect(seen).toMatchObject({ id: before.request_id, status: "completed" })
    expect(await keyStatus(p.projectId, p.keyId)).toBe("rotated")
    expect(await keyStatus(p.projectId, rotated.body.id)).toBe("active")
    // A key in its grace period is not active and cannot be rotated again.
    expect((await gw.admin("POST", `/admin/v1/keys/${p.keyId}/rotate`, { grace_seconds: 10 })).status).toBe(409)
  })

  it("rotation without a body uses the default grace of 86400 s", async () => {
    const p = await newProject(gw)
    const t0 = Date.now()
    const rotated = await gw.admin("POST", `/admin/v1/keys/${p.keyId}/rotate`)
    expect(rotated.status).toBe(201)
    const expiresAt = Date.parse(rotated.body.old_key_expires_at)
    expect(expiresAt).toBeGreaterThanOrEqual(t0 + 86_400_000 - 1000)
    expect(expiresAt).toBeLessThanOrEqual(Date.now() + 86_400_000 + 1000)
    expect(governanceOf(await call(p.key)).status).toBe("completed")
  })

  it("rotation with grace_seconds 0: the old key fails immediately (even though it was cached), the new one works", async () => {
    const p = await newProject(gw)
    await call(p.key)
    const calls = mock.calls
    const rotated = await gw.admin("POST", `/admin/v1/keys/${p.keyId}/rotate`, { grace_seconds: 0 })
    expect(rotated.status).toBe(201)
    await expectApiError(call(p.key), { ...unauthorized, message: /rotated|grace/ })
    expect(mock.calls).toBe(calls)
    expect(governanceOf(await call(rotated.body.secret)).status).toBe("completed")
    expect(await keyStatus(p.projectId, p.keyId)).toBe("expired")
  })

  it("a negative grace is rejected and changes nothing", async () => {
    const p = await newProject(gw)
    const res = await gw.admin("POST", `/admin/v1/keys/${p.keyId}/rotate`, { grace_seconds: -5 })
    expect(res.status).toBe(400)
    expect(res.body.error.param).toBe("grace_seconds")
    expect(await keyStatus(p.projectId, p.keyId)).toBe("active")
    expect(governanceOf(await call(p.key)).status).toBe("completed")
  })

  it("revocation takes effect on the next call through the same instance; other keys of the project keep working", async () => {
    const p = await newProject(gw)
    const other = await newKey(gw, p.projectId)
    await call(p.key) // cached
    const revoked = await gw.admin("POST", `/admin/v1/keys/${p.keyId}/revoke`)
    expect(revoked.status).toBe(200)
    expect(revoked.body).toMatchObject({ id: p.keyId, status: "revoked" })
    expect(revoked.body.revoked_at).not.toBeNull()
    const calls = mock.calls
    await expectApiError(call(p.key), { ...unauthorized, message: /revoked/ })
    await expectApiError(clientFor(gw, p.key, log).get("/requests/req_anything"), unauthorized)
    expect(mock.calls).toBe(calls)
    expect(governanceOf(await call(other.secret)).status).toBe("completed")
    // Revoking again is harmless and keeps the first revocation time.
    const again = await gw.admin("POST", `/admin/v1/keys/${p.keyId}/revoke`)
    expect(again.status).toBe(200)
    expect(again.body.revoked_at).toBe(revoked.body.revoked_at)
  })

  it("revoking a key in its grace period ends the grace at once", async () => {
    const p = await newProject(gw)
    const rotated = await gw.admin("POST", `/admin/v1/keys/${p.keyId}/rotate`, { grace_seconds: 3600 })
    expect(governanceOf(await call(p.key)).status).toBe("completed")
    expect((await gw.admin("POST", `/admin/v1/keys/${p.keyId}/revoke`)).status).toBe(200)
    await expectApiError(call(p.key), { ...unauthorized, message: /revoked/ })
    expect(governanceOf(await call(rotated.body.secret)).status).toBe("completed")
  })

  it("the admin API itself rejects a wrong token", async () => {
    const res = await fetch(`${gw.origin}/admin/v1/projects`, {
      method: "POST",
      headers: { authorization: "Bearer not-the-admin-token", "content-type": "application/json" },
      body: JSON.stringify({ name: "x", budget_credits: 1, rate_limit: { requests_per_minute: 1 } })
    })
    log.push(res.status)
    expect(res.status).toBe(401)
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("invalid_admin_token")
  })
})
