/**
 * Issue 43, the operator's statement and the dashboard's downloads, from outside: a gateway whose
 * Effect Clock runs two months behind serves real calls (the openai client) — receipts of a month
 * that has since closed — and is stopped; a second gateway on the same store, on the real clock,
 * then serves that month's statement (made on demand: the month has closed and nothing of it is held).
 *   - GET /admin/v1/projects/{id}/statements/{period} answers the body GET /v1/statements/{period}
 *     answers the project's key, signed, its totals the sums of the month's export; `tollgate
 *     statement` writes the same bytes; the open month is a 404 naming why, a bad period a 400 naming
 *     `period`, an unknown project a 404;
 *   - in headless Chromium the project page downloads that month's export and statement, verifies
 *     both with the package (the statement's totals against the receipts), and for the open month says
 *     that its statement does not exist yet; a statement altered on its way to the page (spent + 1)
 *     is named (statement_invalid, statement_mismatch).
 */
import { execFile } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Clock, Duration, Effect, Layer, Option, Redacted } from "effect"
import OpenAI from "openai"
import { chromium, type Browser, type Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { readExport } from "../../spec/export.ts"
import { periodBounds, periodOf } from "../../spec/ledger.ts"
import type { Receipt } from "../../spec/receipt.ts"
import { statementFromReceipts, totalsDifferences, type Statement } from "../../spec/statement.ts"
import { verifyRecords } from "../../spec/verify.ts"
import { HttpServer } from "@effect/platform"
import { ServerLive } from "../../src/server.ts"
import { Bootstrap } from "../../src/services/Bootstrap.ts"
import { expectWireError, raw } from "../e2e/helpers.ts"
import { ADMIN_TOKEN, mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { testRuntime } from "../support/runtime.ts"

const CHROMIUM = "/usr/bin/chromium"
process.env.TOLLGATE_CHECKPOINT_INTERVAL_MS = "0"

/** Effect's clock, `offsetMs` behind the real one (its sleeps are the real ones). */
const behind = (offsetMs: number): Clock.Clock => {
  const real = Clock.make()
  const millis = () => real.unsafeCurrentTimeMillis() - offsetMs
  return {
    [Clock.ClockTypeId]: Clock.ClockTypeId,
    unsafeCurrentTimeMillis: millis,
    currentTimeMillis: Effect.sync(millis),
    unsafeCurrentTimeNanos: () => BigInt(millis()) * 1_000_000n,
    currentTimeNanos: Effect.sync(() => BigInt(millis()) * 1_000_000n),
    sleep: (d: Duration.DurationInput) => real.sleep(Duration.decode(d))
  }
}

const now = Date.now()
/** Two months back (past any month-end grace), its 10th at noon. */
const closedPeriod = periodOf(periodBounds(periodOf(periodBounds(periodOf(now)).startMillis - 1)).startMillis - 1)
const openPeriod = periodOf(now)
const dir = mkdtempSync(join(tmpdir(), "tollgate-statement-dl-"))
const databaseUrl = `sqlite:${join(dir, "tollgate.db")}`

let upstream: MockUpstream
let gw: TestGateway
let browser: Browser
let projectId = ""
let key = ""
const problems: Array<string> = []

beforeAll(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run scripts/install-browser.sh`)
  upstream = await startMockUpstream()
  const file = mockGatewayFile(upstream.url)
  // The first gateway lives in the closed month: its receipts, window and key are of that month.
  const pastAt = periodBounds(closedPeriod).startMillis + 9 * 86_400_000 + 12 * 3_600_000
  const past = testRuntime(ServerLive.pipe(Layer.provide(Layer.setClock(behind(now - pastAt)))), {
    databaseUrl,
    adminToken: Option.some(Redacted.make(ADMIN_TOKEN)),
    gateway: file
  })
  const started = await past.runPromise(
    Effect.gen(function* () {
      const server = yield* HttpServer.HttpServer
      const first = (yield* Bootstrap).firstStart!
      return { port: server.address._tag === "TcpAddress" ? server.address.port : 0, projectId: first.projectId, key: first.developmentKey }
    })
  )
  projectId = started.projectId
  key = started.key
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${started.port}/v1`, apiKey: key, maxRetries: 0 })
  for (let i = 0; i < 5; i++) await client.chat.completions.create({ model: "gpt-test", messages: [{ role: "user", content: `last month's call ${i}` }], max_tokens: 6 + i })
  await past.dispose()
  // The second, on the real clock and the same store: one call of the open month.
  gw = await startGateway(file, { databaseUrl })
  await new OpenAI({ baseURL: gw.url, apiKey: key, maxRetries: 0 }).chat.completions.create({ model: "gpt-test", messages: [{ role: "user", content: "this month's call" }] })
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"] })
}, 90_000)
afterAll(async () => {
  await browser?.close()
  await gw?.close()
  await upstream?.close()
  rmSync(dir, { recursive: true, force: true })
})

const admin = (path: string) => raw(gw, path, { key: ADMIN_TOKEN })
const periodExport = async (period: string) => (await (await raw(gw, `/v1/receipts?period=${period}`, { key })).text())
const receiptsOf = (text: string) => readExport(text).flatMap((r) => (r.kind === "receipt" ? [r.receipt as Receipt] : []))

const cli = (args: ReadonlyArray<string>): Promise<{ code: number; stdout: string; stderr: string }> =>
  new Promise((resolve) =>
    execFile(process.execPath, ["bin/tollgate.mjs", ...args], { cwd: process.cwd(), env: { ...process.env, TOLLGATE_URL: gw.origin, TOLLGATE_ADMIN_TOKEN: ADMIN_TOKEN } }, (err, stdout, stderr) =>
      resolve({ code: err === null ? 0 : (err.code as number), stdout, stderr })
    )
  )

describe("the operator's statement endpoint, tollgate statement, and the dashboard's downloads", { timeout: 120_000 }, () => {
  it("the admin statement is the project's own, signed, its totals the month's export; open month 404, bad period 400, unknown project 404; the CLI writes it", async () => {
    const res = await admin(`/admin/v1/projects/${projectId}/statements/${closedPeriod}`)
    expect(res.status).toBe(200)
    const text = await res.text()
    const own = await raw(gw, `/v1/statements/${closedPeriod}`, { key })
    expect(own.status).toBe(200)
    expect(await own.text()).toBe(text)
    const statement = JSON.parse(text) as Statement
    expect(statement).toMatchObject({ object: "statement", project_id: projectId, period: closedPeriod, receipt_count: 5 })
    const exported = await periodExport(closedPeriod)
    expect(totalsDifferences(statement, statementFromReceipts(receiptsOf(exported)))).toEqual([])
    // the verifier agrees: signature, totals, and the receipts' own checks
    const verdict = verifyRecords(readExport(exported), { statements: [statement] })
    expect(verdict.findings).toEqual([])
    expect(verdict.summary.statements).toBe(1)

    await expectWireError(await admin(`/admin/v1/projects/${projectId}/statements/${openPeriod}`), { status: 404, code: "not_found", message: /not closed/ })
    await expectWireError(await admin(`/admin/v1/projects/${projectId}/statements/2026-13`), { status: 400, code: "invalid_request_error", param: "period" })
    await expectWireError(await admin(`/admin/v1/projects/prj_nope/statements/${closedPeriod}`), { status: 404, code: "not_found" })
    expect((await raw(gw, `/admin/v1/projects/${projectId}/statements/${closedPeriod}`)).status).toBe(401)

    const out = join(dir, "statement.json")
    const written = await cli(["statement", projectId, closedPeriod, "--out", out])
    expect(written.code).toBe(0)
    expect(readFileSync(out, "utf8")).toBe(text)
    const open = await cli(["statement", projectId, openPeriod])
    expect(open.code).toBe(1)
    expect(open.stderr).toMatch(/^404: .*not closed/)
    expect((await cli(["statement", projectId])).code).toBe(2)
  })

  /** A fresh browser context signed in with `token`, on the project's page; every console error and 5xx recorded. */
  const projectPage = async (token: string): Promise<Page> => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 1000 }, timezoneId: "UTC", locale: "en-GB", acceptDownloads: true })
    const page = await context.newPage()
    page.on("console", (m) => {
      if (m.type() === "error" && !/status of 40[14]/.test(m.text())) problems.push(`console: ${m.text()}`)
    })
    page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`))
    page.on("response", (r) => {
      if (r.status() >= 500) problems.push(`${r.status()}: ${r.url()}`)
    })
    await page.goto(`${gw.origin}/dashboard/`)
    await page.getByLabel("Admin token or project key").fill(token)
    await page.getByRole("button", { name: "Sign in" }).click()
    await page.getByRole("button", { name: "Sign in" }).waitFor({ state: "detached" })
    await page.goto(`${gw.origin}/dashboard/#/projects/${projectId}`)
    await page.getByRole("heading", { name: "Verify a month's bill" }).waitFor()
    return page
  }

  const downloaded = async (page: Page, which: "export" | "statement"): Promise<string> => {
    const [download] = await Promise.all([page.waitForEvent("download"), page.locator(`[data-download="${which}"]`).click()])
    return readFileSync((await download.path())!, "utf8")
  }

  it("headless Chromium: the closed month's export and statement downloaded and verified there; the open month has none yet", async () => {
    const served = await (await admin(`/admin/v1/projects/${projectId}/statements/${closedPeriod}`)).json()
    for (const token of [ADMIN_TOKEN, key]) {
      const page = await projectPage(token)
      // the open month (the default): no statement offered, and the page says why
      await expect(page.locator('[data-statement="open"]').textContent()).resolves.toMatch(new RegExp(`${openPeriod} is still open`))
      expect(await page.getByRole("button", { name: /Get the statement/ }).count()).toBe(0)

      await page.locator("#v-month").fill(closedPeriod)
      await page.getByRole("button", { name: `Get the statement of ${closedPeriod}` }).click()
      const statement = JSON.parse(await downloaded(page, "statement")) as Statement
      expect(statement).toEqual(served)
      await page.getByRole("button", { name: `Export and verify the receipts of ${closedPeriod}` }).click()
      await page.locator('[data-export-verdict="clean"]').waitFor({ timeout: 20_000 })
      expect(await page.locator("[data-export-verdict]").textContent()).toContain("✓ 5 receipts")
      expect(await page.locator("[data-export-verdict]").textContent()).toContain("the statement's totals are the receipts' sums")
      const exported = await downloaded(page, "export")
      expect(receiptsOf(exported).map((r) => r.period)).toEqual(Array(5).fill(closedPeriod))
      expect(exported).toBe(await periodExport(closedPeriod))
      await page.context().close()
    }
    expect(problems).toEqual([])
  })

  it("a statement altered on its way to the page (spent + 1) is named there", async () => {
    const page = await projectPage(ADMIN_TOKEN)
    await page.route(`**/admin/v1/projects/${projectId}/statements/${closedPeriod}`, async (route) => {
      const res = await route.fetch()
      const body = (await res.json()) as Statement
      await route.fulfill({ response: res, json: { ...body, spent: body.spent + 1 } })
    })
    await page.locator("#v-month").fill(closedPeriod)
    await page.getByRole("button", { name: `Export and verify the receipts of ${closedPeriod}` }).click()
    await page.locator('[data-export-verdict="clean"]').waitFor({ timeout: 20_000 })
    await page.getByRole("button", { name: `Get the statement of ${closedPeriod}` }).click()
    await page.locator('[data-export-verdict="findings"]').waitFor({ timeout: 20_000 })
    const text = (await page.locator("[data-export-verdict]").textContent()) ?? ""
    expect(text).toContain("statement_invalid")
    expect(text).toContain("statement_mismatch")
    await page.context().close()
    expect(problems).toEqual([])
  })
})
