import { existsSync } from "node:fs"
import { chromium, type Browser } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startMockUpstream, type MockUpstream } from "../support/mockUpstream.ts"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"

// Debian's Chromium, installed by scripts/install-browser.sh (run by .ci/run).
const CHROMIUM = "/usr/bin/chromium"

describe("the /docs page in a real browser", () => {
  let upstream: MockUpstream
  let gw: TestGateway
  let browser: Browser
  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run scripts/install-browser.sh`)
    upstream = await startMockUpstream()
    gw = await startGateway(mockGatewayFile(upstream.url))
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"]
    })
  }, 60_000)
  afterAll(async () => {
    await browser?.close()
    await gw?.close()
    await upstream?.close()
  })

  it("is the platform's Scalar page of /openapi.json: every operation rendered, the chat errors' statuses shown, nothing loaded from another origin", async () => {
    const page = await browser.newPage()
    const requests: Array<string> = []
    const failed: Array<string> = []
    page.on("request", (r) => requests.push(r.url()))
    page.on("requestfailed", (r) => failed.push(r.url()))
    await page.goto(`${gw.origin}/docs`)
    await page.getByText("OAS 3.1.0").first().waitFor({ timeout: 30_000 })
    const doc: any = await (await fetch(`${gw.origin}/openapi.json`)).json()
    // The page renders the very document /openapi.json serves.
    const embedded = JSON.parse((await page.locator("#api-reference").textContent())!)
    expect(embedded).toEqual(doc)
    // Scalar breaks paths with zero-width spaces in its sidebar; the text is compared without them.
    await page.getByText("/admin/v1/projects/{id}/requests/{request_id}/receipt").first().waitFor({ timeout: 30_000 })
    const text = (await page.locator("body").innerText()).replace(/\u200b/g, "")
    for (const path of Object.keys(doc.paths)) expect(text, path).toContain(path)
    // The chat endpoint's error answers, each shown as its status over its description.
    const chat = doc.paths["/v1/chat/completions"].post.responses
    for (const code of ["402", "409", "422", "429", "503"]) {
      await page.getByText(chat[code].description).first().waitFor({ timeout: 30_000 })
      expect((await page.locator("body").innerText()).replace(/\u200b/g, "")).toContain(`${code}\n${chat[code].description}`)
    }
    expect(text).toContain("Tollgate")
    // Scalar's script is inlined and its web fonts are off: the page asks nothing of any other origin.
    expect(requests.filter((url) => !url.startsWith(gw.origin) && !url.startsWith("data:") && !url.startsWith("blob:"))).toEqual([])
    expect(failed).toEqual([])
    await page.close()
  }, 60_000)
})
