/**
 * The dashboard's Webhooks page (issue 42) in headless Chromium (playwright-core, /usr/bin/chromium):
 * the operator adds an endpoint (its secret shown once), a key event is delivered to a verifying
 * receiver, the delivery log shows it, and "Send again" delivers the same event id a second time.
 * The dashboard bundle is built first (scripts/build-dashboard.mjs), as `npm start` does.
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdtempSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { type Browser, chromium } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ADMIN_TOKEN, mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { eventually, type Receiver, startReceiver } from "./receiver.ts"

const CHROMIUM = "/usr/bin/chromium"
process.env.TOLLGATE_WEBHOOK_ALLOW_PRIVATE = "1"
process.env.TOLLGATE_WEBHOOK_POLL_MS = "20"
process.env.TOLLGATE_WEBHOOK_KEY_FILE = join(mkdtempSync(join(tmpdir(), "tollgate-whkey-")), "webhook-secret-key")

describe("the dashboard's Webhooks page in headless Chromium", () => {
  let upstream: MockUpstream
  let gw: TestGateway
  let browser: Browser
  let receiver: Receiver
  const problems: Array<string> = []

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run scripts/install-browser.sh`)
    execFileSync(process.execPath, ["scripts/build-dashboard.mjs", "--if-stale"], { stdio: "ignore" })
    upstream = await startMockUpstream()
    gw = await startGateway(mockGatewayFile(upstream.url))
    receiver = await startReceiver()
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"] })
  }, 120_000)
  afterAll(async () => {
    await browser?.close()
    await gw?.close()
    await upstream?.close()
    await receiver?.close()
  })

  it("add an endpoint, see its delivery, send it again", async () => {
    const context = await browser.newContext({ timezoneId: "UTC", locale: "en-GB" })
    const page = await context.newPage()
    page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`))
    page.on("response", (r) => {
      if (r.status() >= 500) problems.push(`${r.status()}: ${r.url()}`)
    })
    await page.goto(`${gw.origin}/dashboard/`)
    await page.getByLabel("Admin token or project key").fill(ADMIN_TOKEN)
    await page.getByRole("button", { name: "Sign in" }).click()
    await page.getByRole("link", { name: "Webhooks" }).click()
    await page.getByRole("heading", { name: "Webhooks" }).waitFor()
    await page.getByLabel("URL (https)").fill(receiver.url)
    await page.getByLabel("Events (comma-separated, or *)").fill("key.created, key.revoked")
    await page.getByRole("button", { name: "Add endpoint" }).click()
    const shown = await page.locator("[data-secret] code").nth(1).textContent()
    expect(shown).toMatch(/^whsec_/)
    receiver.secrets.push(shown!)
    const row = page.locator("tr[data-endpoint]")
    await expect.poll(() => row.count()).toBe(1)
    const endpointId = await row.getAttribute("data-endpoint")
    // A key event, delivered and verified.
    const key = await gw.admin("POST", `/admin/v1/projects/${gw.projectId}/keys`, { environment: "staging" })
    expect(key.status).toBe(201)
    await eventually("delivered", () => receiver.acknowledged().size === 1)
    await eventually("recorded delivered", async () => (await gw.admin("GET", `/admin/v1/webhooks/${endpointId}/deliveries`)).body.data[0]?.status === "delivered")
    // Reloading the page shows the secret no more.
    await page.reload()
    await page.getByRole("heading", { name: "Webhooks" }).waitFor()
    expect(await page.locator("[data-secret]").count()).toBe(0)
    await page.getByRole("link", { name: endpointId! }).click()
    const delivery = page.locator("tr[data-delivery]")
    await expect.poll(() => delivery.count()).toBe(1)
    expect(await delivery.first().textContent()).toContain("delivered")
    expect(await delivery.first().textContent()).toContain("key.created")
    await delivery.first().getByRole("button", { name: "Send again" }).click()
    await page.getByText(/queued again as del_/).waitFor()
    await eventually("sent again", () => [...receiver.acknowledged().values()][0] === 2)
    await expect.poll(() => delivery.count()).toBe(2)
    for (const r of receiver.received) expect(r.verified).toBe(true)
    expect(problems).toEqual([])
    await context.close()
  }, 60_000)
})
