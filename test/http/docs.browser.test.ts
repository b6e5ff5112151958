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

  it("renders every documented operation from /openapi.json, with its status codes", async () => {
    const page = await browser.newPage()
    const failed: Array<string> = []
    page.on("requestfailed", (r) => failed.push(r.url()))
    await page.goto(`${gw.origin}/docs`)
    await page.waitForSelector(".op")
    const doc: any = await (await fetch(`${gw.origin}/openapi.json`)).json()
    const expected = Object.entries(doc.paths).flatMap(([path, item]) => Object.keys(item as object).map((m) => `${m.toUpperCase()} ${path}`))
    const shown = await page.$$eval(".op", (ops) => ops.map((o) => `${o.querySelector(".method")!.textContent} ${o.querySelector(".path")!.textContent}`))
    expect(shown.sort()).toEqual(expected.sort())
    const chat = page.locator('.op[data-path="/v1/chat/completions"] .statuses')
    for (const code of ["402", "409", "422", "429", "503"]) await expect(chat.textContent()).resolves.toContain(code)
    expect(await page.textContent("#summary")).toContain("OpenAPI 3.1.0")
    expect(await page.textContent("#error")).toBe("")
    expect(failed).toEqual([])
    await page.close()
  })
})
