/**
 * `tollgate webhooks …` and `tollgate events list` (src/cli/webhooks.ts), run as a user runs them
 * (bin/tollgate.mjs in a child process) against a real gateway and a verifying receiver.
 */
import { execFile } from "node:child_process"
import { mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ADMIN_TOKEN, mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { eventually, type Receiver, startReceiver } from "./receiver.ts"

process.env.TOLLGATE_WEBHOOK_ALLOW_PRIVATE = "1"
process.env.TOLLGATE_WEBHOOK_POLL_MS = "20"
process.env.TOLLGATE_WEBHOOK_KEY_FILE = join(mkdtempSync(join(tmpdir(), "tollgate-whkey-")), "webhook-secret-key")

interface Run {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

describe("tollgate webhooks / events", () => {
  let upstream: MockUpstream
  let gw: TestGateway
  let receiver: Receiver
  const cli = (args: ReadonlyArray<string>): Promise<Run> =>
    new Promise((resolve) => {
      const env: NodeJS.ProcessEnv = { ...process.env, TOLLGATE_URL: gw.origin, TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN }
      execFile(process.execPath, ["bin/tollgate.mjs", ...args], { cwd: process.cwd(), env }, (err, stdout, stderr) => resolve({ code: err === null ? 0 : Number(err.code), stdout, stderr }))
    })
  const json = (r: Run) => JSON.parse(r.stdout) as any

  beforeAll(async () => {
    upstream = await startMockUpstream()
    gw = await startGateway(mockGatewayFile(upstream.url))
    receiver = await startReceiver()
  })
  afterAll(async () => {
    await gw.close()
    await upstream.close()
    await receiver.close()
  })

  it("create, list, get, update, rotate-secret, deliveries, retry, delete; events list", async () => {
    const created = await cli(["webhooks", "create", "--url", receiver.url, "--events", "key.created,key.revoked", "--description", "cli"])
    expect(created.code).toBe(0)
    const endpoint = json(created)
    expect(endpoint).toMatchObject({ object: "webhook_endpoint", url: receiver.url, events: ["key.created", "key.revoked"], description: "cli", enabled: true })
    expect(endpoint.secret).toMatch(/^whsec_/)
    const rotated = json(await cli(["webhooks", "rotate-secret", endpoint.id]))
    expect(rotated.secret).toMatch(/^whsec_/)
    expect(rotated.secret).not.toBe(endpoint.secret)
    receiver.secrets.push(rotated.secret) // only the new secret verifies from now on
    expect(json(await cli(["webhooks", "list", "--all"])).data.map((e: any) => e.id)).toContain(endpoint.id)
    expect(json(await cli(["webhooks", "get", endpoint.id])).secret).toBeUndefined()
    const updated = json(await cli(["webhooks", "update", endpoint.id, "--events", "*"]))
    expect(updated.events).toEqual(["*"])
    const key = await gw.admin("POST", `/admin/v1/projects/${gw.projectId}/keys`, { environment: "staging" })
    await eventually("delivered", () => receiver.acknowledged().size === 1)
    await eventually("recorded delivered", async () => (await gw.admin("GET", `/admin/v1/webhooks/${endpoint.id}/deliveries`)).body.data[0]?.status === "delivered")
    const deliveries = json(await cli(["webhooks", "deliveries", endpoint.id]))
    expect(deliveries.data[0]).toMatchObject({ status: "delivered", event_type: "key.created", attempts: 1, last_status_code: 200 })
    const again = await cli(["webhooks", "retry", endpoint.id, deliveries.data[0].id])
    expect(again.code).toBe(0)
    await eventually("sent again", () => [...receiver.acknowledged().values()][0] === 2)
    const events = json(await cli(["events", "list", "--type", "key.created", "--all"]))
    expect(events.data.some((e: any) => e.data.key_id === key.body.id)).toBe(true)
    const bad = await cli(["webhooks", "create", "--url", "ftp://x"])
    expect(bad.code).toBe(1)
    expect(JSON.parse(bad.stderr).error.param).toBe("url")
    expect(json(await cli(["webhooks", "delete", endpoint.id]))).toEqual({ id: endpoint.id, object: "webhook_endpoint", deleted: true })
    expect((await cli(["webhooks", "get", endpoint.id])).code).toBe(1)
    for (const r of receiver.received) expect(r.verified).toBe(true)
  })
})
