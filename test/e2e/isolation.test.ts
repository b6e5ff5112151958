/**
 * Tenant isolation (docs/contract.md §2): requests, receipts, idempotency keys and budgets belong to the
 * (project, environment) that created them. Another tenant's request id answers exactly like an
 * unknown one, so ids leak nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { clientFor, expectNoServerErrors, governanceOf, ledgerState, newKey, newProject, raw, type StatusLog } from "./helpers.ts"

/** A request id that has never existed, of the same form as real ones. */
const unknownId = (like: string) => `req_${"z".repeat(like.length - 4)}`

describe("cross-tenant isolation", () => {
  let mock: MockUpstream
  let gw: TestGateway
  const log: StatusLog = []
  let a: { projectId: string; key: string }
  let b: { projectId: string; key: string }
  let aStaging: string
  let aRequest: string

  beforeAll(async () => {
    mock = await startMockUpstream()
    gw = await startGateway(mockGatewayFile(mock.url))
    a = { projectId: gw.projectId, key: gw.devKey }
    b = await newProject(gw, { name: "tenant-b" })
    aStaging = (await newKey(gw, a.projectId, "staging")).secret
    aRequest = governanceOf(await clientFor(gw, a.key, log).chat.completions.create({ model: "auto", messages: [{ role: "user", content: "tenant a" }] })).request_id
  })

  afterAll(async () => {
    expectNoServerErrors(log)
    await gw.close()
    await mock.close()
  })

  /** Status, headers (names, minus Date) and body with the id masked: what a prober could compare. */
  const observe = async (key: string, path: string, id: string) => {
    const res = await raw(gw, path, { key }, log)
    const text = (await res.text()).split(id).join("<id>")
    const headers = [...res.headers.keys()].filter((h) => h !== "date").sort()
    return { status: res.status, headers, body: JSON.parse(text) as unknown }
  }

  for (const suffix of ["", "/receipt"]) {
    it(`GET /v1/requests/{id}${suffix}: another project's id answers exactly like an unknown id`, async () => {
      const own = await raw(gw, `/v1/requests/${aRequest}${suffix}`, { key: a.key }, log)
      expect(own.status).toBe(200)
      const ownBody = (await own.json()) as { request_id?: string; id?: string }
      expect(ownBody.request_id ?? ownBody.id).toBe(aRequest)

      const foreign = await observe(b.key, `/v1/requests/${aRequest}${suffix}`, aRequest)
      const ghost = unknownId(aRequest)
      const unknown = await observe(b.key, `/v1/requests/${ghost}${suffix}`, ghost)
      expect(foreign.status).toBe(404)
      expect(foreign.body).toMatchObject({ error: { code: "request_not_found", type: "invalid_request_error", param: null } })
      expect(foreign).toEqual(unknown)
    })

    it(`GET /v1/requests/{id}${suffix}: the same project in another environment cannot see it either`, async () => {
      const foreign = await observe(aStaging, `/v1/requests/${aRequest}${suffix}`, aRequest)
      const ghost = unknownId(aRequest)
      const unknown = await observe(aStaging, `/v1/requests/${ghost}${suffix}`, ghost)
      expect(foreign.status).toBe(404)
      expect(foreign).toEqual(unknown)
    })
  }

  it("the other direction: project B's request is invisible to project A", async () => {
    const bRequest = governanceOf(await clientFor(gw, b.key, log).chat.completions.create({ model: "auto", messages: [{ role: "user", content: "tenant b" }] })).request_id
    expect((await raw(gw, `/v1/requests/${bRequest}`, { key: b.key }, log)).status).toBe(200)
    const foreign = await observe(a.key, `/v1/requests/${bRequest}/receipt`, bRequest)
    const ghost = unknownId(bRequest)
    expect(foreign).toEqual(await observe(a.key, `/v1/requests/${ghost}/receipt`, ghost))
    expect(foreign.status).toBe(404)
  })

  it("idempotency keys are per tenant: the same key in another project is neither a replay nor a conflict", async () => {
    const key = `shared-key-${Date.now()}`
    const aClient = clientFor(gw, a.key, log)
    const bClient = clientFor(gw, b.key, log)
    const first = await aClient.chat.completions.create({ model: "auto", messages: [{ role: "user", content: "same key, A" }], metadata: { idempotency_key: key } })
    const calls = mock.calls
    // Same payload in B: runs again (not A's replay).
    const sameBody = await bClient.chat.completions
      .create({ model: "auto", messages: [{ role: "user", content: "same key, A" }], metadata: { idempotency_key: key } })
      .withResponse()
    expect(sameBody.response.headers.get("idempotent-replayed")).toBeNull()
    expect(governanceOf(sameBody.data).request_id).not.toBe(governanceOf(first).request_id)
    // Different payload in the staging environment of A: not a conflict either.
    const staging = await clientFor(gw, aStaging, log)
      .chat.completions.create({ model: "auto", messages: [{ role: "user", content: "same key, other payload" }], metadata: { idempotency_key: key } })
      .withResponse()
    expect(staging.response.status).toBe(200)
    expect(staging.response.headers.get("idempotent-replayed")).toBeNull()
    expect(mock.calls - calls).toBe(2)
  })

  it("budgets are per project: B's spending leaves A's window untouched", async () => {
    const before = ledgerState(gw, a.projectId)
    const bBefore = ledgerState(gw, b.projectId)
    const g = governanceOf(await clientFor(gw, b.key, log).chat.completions.create({ model: "auto", messages: [{ role: "user", content: "spend in b" }] }))
    expect(ledgerState(gw, a.projectId)).toEqual(before)
    const bAfter = ledgerState(gw, b.projectId)
    expect(bAfter.spent - bBefore.spent).toBe(g.credits_charged)
    expect(bAfter.receipts - bBefore.receipts).toBe(1)
  })

  it("metadata.project_id of project A with B's key is refused, and creates nothing in either project", async () => {
    const aBefore = ledgerState(gw, a.projectId)
    const bBefore = ledgerState(gw, b.projectId)
    const res = await raw(gw, "/v1/chat/completions", {
      key: b.key,
      body: JSON.stringify({ model: "auto", messages: [{ role: "user", content: "impersonate" }], metadata: { project_id: a.projectId } })
    }, log)
    expect(res.status).toBe(401)
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("invalid_api_key")
    expect(ledgerState(gw, a.projectId)).toEqual(aBefore)
    expect(ledgerState(gw, b.projectId)).toEqual(bBefore)
  })
})
