/**
 * The dashboard in a real browser (Debian's Chromium through playwright-core), against a real
 * gateway and the real mock upstream: an operator signs in, creates a project and a key, uses the
 * key with the `openai` SDK, sees the call in the request log and the chart, rotates the key and
 * uses both during the grace period, revokes one and sees the next call fail with 401, verifies a
 * receipt in the browser and exports and verifies the month's receipts there (the package @tollgate/spec)
 * and downloads them as one file; a team signs in with a key and cannot see another project. Failed
 * sign-in, an expired session and a forged CSRF token are refused. Budgets below the project (issue
 * 41): a capped key's bar and an uncapped key's "no budget", the end-user default, and the end users
 * ranked by what they spent through governed calls, each figure checked against the receipts.
 *
 * `TOLLGATE_SCREENSHOTS=1` (npm run screenshots) also saves the screens to docs/screenshots/.
 */
import { existsSync, mkdirSync } from "node:fs"
import { join } from "node:path"
import OpenAI from "openai"
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ADMIN_TOKEN, mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"

const CHROMIUM = "/usr/bin/chromium"
const SHOTS = process.env.TOLLGATE_SCREENSHOTS === "1" ? join(import.meta.dirname, "../../docs/screenshots") : undefined

describe("the dashboard in headless Chromium", () => {
  let upstream: MockUpstream
  let gw: TestGateway
  let browser: Browser
  const problems: Array<string> = []

  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: run scripts/install-browser.sh`)
    upstream = await startMockUpstream()
    // Two routes priced high enough that a few calls show on the budget bar and the charts.
    gw = await startGateway(
      mockGatewayFile(
        upstream.url,
        [
          { name: "gpt-test", provider: "mock", upstream_model: "mock-model", max_output_tokens: 256, auto: true },
          { name: "gpt-mini", provider: "mock", upstream_model: "mock-mini", max_output_tokens: 256, auto: false }
        ],
        { "gpt-test": { input: 5_000_000, output: 20_000_000 }, "gpt-mini": { input: 1_000_000, output: 4_000_000 } }
      )
    )
    // launch() starts Chromium on a fresh temporary profile; every test context is a fresh cookie jar.
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"]
    })
    if (SHOTS !== undefined) mkdirSync(SHOTS, { recursive: true })
  }, 60_000)
  afterAll(async () => {
    await browser?.close()
    await gw?.close()
    await upstream?.close()
  })

  /** A fresh context (its own cookie jar) whose page reports console errors, CSP violations and failed requests. */
  const open = async (viewport = { width: 1280, height: 900 }): Promise<{ context: BrowserContext; page: Page }> => {
    const context = await browser.newContext({ viewport, deviceScaleFactor: 1, timezoneId: "UTC", locale: "en-GB" })
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: gw.origin })
    const page = await context.newPage()
    page.on("console", (m) => {
      // Refusals the journey provokes on purpose (401 sign-in, 403 CSRF, 404 another project) are logged by the browser as failed loads.
      if (m.type() === "error" && !/status of 40[134]/.test(m.text())) problems.push(`console: ${m.text()}`)
    })
    page.on("response", (r) => {
      if (r.status() >= 500) problems.push(`${r.status()}: ${r.url()}`)
    })
    page.on("pageerror", (e) => problems.push(`pageerror: ${e.message}`))
    page.on("requestfailed", (r) => problems.push(`requestfailed: ${r.url()}`))
    page.on("request", (r) => {
      if (!r.url().startsWith(gw.origin)) problems.push(`off-origin request: ${r.url()}`)
    })
    return { context, page }
  }

  const shot = async (page: Page, name: string, fullPage = true) => {
    if (SHOTS !== undefined) await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage })
  }

  const signIn = async (page: Page, token: string) => {
    await page.goto(`${gw.origin}/dashboard/`)
    await page.getByLabel("Admin token or project key").fill(token)
    await page.getByRole("button", { name: "Sign in" }).click()
  }

  const chat = (key: string, content: string, model = "auto") =>
    new OpenAI({ baseURL: gw.url, apiKey: key, maxRetries: 0 }).chat.completions.create({ model, messages: [{ role: "user", content }] })

  it("operator: sign in, project, key, calls, request log, chart, rotate, revoke, verify a receipt; team: own project only", async () => {
    const started = Date.now()
    const { context, page } = await open()

    // The page is served with a strict CSP and nothing but this origin.
    const res = await page.goto(`${gw.origin}/dashboard/`)
    const csp = res!.headers()["content-security-policy"]!
    expect(csp).toContain("default-src 'none'")
    expect(csp).toContain("script-src 'self'")
    expect(csp).not.toContain("unsafe-inline")

    // A wrong token is refused.
    await page.getByLabel("Admin token or project key").fill("wrong-token")
    await page.getByRole("button", { name: "Sign in" }).click()
    await expect(page.getByRole("alert").textContent()).resolves.toMatch(/Sign-in failed: Wrong admin token/)
    await shot(page, "sign-in")

    // The operator signs in; the session is an HttpOnly cookie the page cannot read, nothing in storage.
    await page.getByLabel("Admin token or project key").fill(ADMIN_TOKEN)
    await page.getByRole("button", { name: "Sign in" }).click()
    await page.getByRole("heading", { name: "Projects" }).waitFor()
    expect(await page.evaluate("document.cookie")).toBe("")
    expect(await page.evaluate("localStorage.length + sessionStorage.length")).toBe(0)
    const cookies = await context.cookies()
    expect(cookies.map((c) => [c.name, c.httpOnly, c.sameSite])).toEqual([["tollgate_session", true, "Strict"]])
    expect(page.url()).not.toContain(ADMIN_TOKEN)

    // Create a project.
    await page.getByLabel("Name").fill("checkout")
    await page.getByLabel("Budget cap (Credits per month)").fill("50000")
    await page.getByLabel("Requests per minute").fill("600")
    await page.getByRole("button", { name: "Create project" }).click()
    await page.getByRole("heading", { name: "checkout" }).waitFor()
    const projectId = /#\/projects\/(prj_[a-z2-7]+)/.exec(page.url())![1]!

    // Create a key: the secret is shown once, with a warning and a copy button.
    await page.getByLabel("Environment", { exact: true }).last().selectOption("production")
    await page.getByRole("button", { name: "Create key" }).click()
    const dialog = page.getByRole("dialog")
    await expect(dialog.getByRole("alert").textContent()).resolves.toContain("shown only once")
    const firstKey = await dialog.locator("[data-secret]").inputValue()
    expect(firstKey).toMatch(/^tg_prd_/)
    await dialog.getByRole("button", { name: "Copy key" }).click()
    await dialog.getByRole("button", { name: "Copied ✓" }).waitFor()
    expect(await page.evaluate("navigator.clipboard.readText()")).toBe(firstKey)
    await shot(page, "key-created", false)
    await dialog.getByRole("button", { name: "I have stored it" }).click()
    expect(page.url()).not.toContain(firstKey)

    // Before any call: the chart's totals are zero.
    const creditsTotal = () => page.locator('[data-total="credits"]').first().textContent().catch(() => null)
    const chartPixels = () => page.locator('[data-chart="credits"] canvas').first().evaluate((c) => (c as unknown as { toDataURL(): string }).toDataURL())
    await page.locator('[data-chart="credits"] canvas').first().waitFor()
    const pixelsBefore = await chartPixels()
    expect(await page.locator('[data-field="receipts"]').textContent()).toBe("0")

    // Use the key with the OpenAI SDK, three times.
    const completions = []
    for (let i = 0; i < 3; i++) completions.push(await chat(firstKey, `order ${i}`, i === 2 ? "gpt-mini" : "auto"))
    const requestId = (completions[0] as any).governance.request_id as string

    // The chart and the totals change; the month's receipts total equals spent; the key was last used just now.
    await page.reload()
    await page.getByRole("heading", { name: "checkout" }).waitFor()
    await expect.poll(() => page.locator('[data-field="receipts"]').textContent()).toBe("3")
    const spent = await page.locator('[data-field="spent"]').first().textContent()
    expect(await page.locator('[data-field="receipts-credits"]').textContent()).toBe(spent)
    expect(await page.getByTestId("receipts-total").textContent()).toContain("equal to spent")
    expect(Number((await creditsTotal())!.replace(/,/g, ""))).toBeGreaterThan(0)
    expect(await chartPixels()).not.toBe(pixelsBefore)
    await expect(page.locator('[data-field="last-used"]').first().textContent()).resolves.toMatch(/s ago/)

    // Edit the budget cap: the bar's figures follow.
    await page.getByLabel("Budget cap (Credits)", { exact: true }).fill("60000")
    await page.getByRole("button", { name: "Save limits" }).click()
    await expect.poll(() => page.locator('[data-field="cap"]').first().textContent()).toBe("60,000")
    await shot(page, "project")

    // The request log lists the calls; a search finds one; its detail shows attempts and verification.
    await page.getByRole("link", { name: "Requests and receipts" }).click()
    await page.getByRole("heading", { name: "Requests and receipts" }).waitFor()
    await expect.poll(() => page.locator("[data-request]").count()).toBe(3)
    await shot(page, "requests")
    await page.getByLabel("Search").fill(requestId)
    await page.getByRole("button", { name: "Apply" }).click()
    await expect.poll(() => page.locator("[data-request]").count()).toBe(1)
    await page.getByRole("link", { name: requestId }).click()
    await page.locator('[data-table="attempts"] tbody tr').first().waitFor()
    expect(await page.locator('[data-table="attempts"] tbody tr').count()).toBe(1)

    // Verify the receipt in the browser: hash, Ed25519 signature (served public key), chain link.
    await page.getByRole("button", { name: "Verify receipt in this browser" }).click()
    await page.locator('[data-verdict="valid"]').waitFor()
    expect(await page.locator(".verdict").textContent()).toContain("(@tollgate/spec)")
    await shot(page, "receipt")

    // This month's export: downloaded as one JSON Lines file and verified in the browser by the package.
    await page.goto(`${gw.origin}/dashboard/#/projects/${projectId}`)
    await page.getByRole("button", { name: "Export and verify this month's receipts" }).click()
    await page.locator('[data-export-verdict="clean"]').waitFor({ timeout: 20_000 })
    const [download] = await Promise.all([page.waitForEvent("download"), page.locator('[data-download="export"]').click()])
    const exported = (await new Promise<string>((resolve, reject) => {
      void download.createReadStream().then((stream) => {
        let text = ""
        stream.setEncoding("utf8").on("data", (c: string) => (text += c)).on("end", () => resolve(text)).on("error", reject)
      })
    })).trim().split("\n").map((l) => JSON.parse(l) as { object: string; project_id: string })
    expect(exported[0]).toMatchObject({ object: "receipt_export", project_id: projectId })
    const exportedReceipts = exported.filter((r) => r.object === "receipt")
    expect(exportedReceipts.length).toBeGreaterThan(0)
    expect(await page.locator("[data-export-verdict]").textContent()).toContain(`✓ ${exportedReceipts.length} receipts`)

    // Rotate the key with a grace period: both the old and the new key work.
    await page.goto(`${gw.origin}/dashboard/#/projects/${projectId}`)
    await page.getByRole("button", { name: /^Rotate key_/ }).click()
    await page.getByLabel("Grace period (seconds)").fill("3600")
    await page.getByRole("button", { name: "Rotate key", exact: true }).click()
    const rotated = page.getByRole("dialog")
    await rotated.getByText(/keeps working until/).waitFor({ timeout: 10_000 })
    await expect(rotated.textContent()).resolves.toContain("keeps working until")
    const secondKey = await rotated.locator("[data-secret]").inputValue()
    await rotated.getByRole("button", { name: "I have stored it" }).click()
    expect(secondKey).not.toBe(firstKey)
    await chat(firstKey, "old key during grace")
    await chat(secondKey, "new key")
    await expect.poll(() => page.locator("[data-key] .badge-rotated").count()).toBe(1)

    // Revoke the old key, with confirmation: its next call fails with 401, the new one still works.
    await page.getByRole("button", { name: /^Revoke key_/ }).first().click()
    await page.getByRole("dialog").getByRole("button", { name: "Revoke key" }).click()
    await expect.poll(() => page.locator("[data-key] .badge-revoked").count()).toBe(1)
    await expect(chat(firstKey, "after revoke")).rejects.toMatchObject({ status: 401 })
    await chat(secondKey, "still fine")

    // A forged or missing CSRF token is refused, even with the session cookie.
    const forged = await page.evaluate(async () => {
      const post = (headers: Record<string, string>) =>
        fetch("/admin/v1/projects", { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify({ name: "x", budget_credits: 1, rate_limit: { requests_per_minute: 1 } }) })
          .then(async (r) => [r.status, ((await r.json()) as any).error.code])
      return [await post({ "x-csrf-token": "forged" }), await post({})]
    })
    expect(forged).toEqual([[403, "invalid_csrf_token"], [403, "invalid_csrf_token"]])

    // The phone layout of the project page.
    if (SHOTS !== undefined) {
      const phone = await open({ width: 390, height: 844 })
      await signIn(phone.page, ADMIN_TOKEN)
      await phone.page.getByRole("heading", { name: "Projects" }).waitFor()
      await phone.page.goto(`${gw.origin}/dashboard/#/projects/${projectId}`)
      await phone.page.locator('[data-chart="credits"] canvas').first().waitFor()
      await shot(phone.page, "project-phone")
      await phone.context.close()
    }

    // Sign out: back to the sign-in page, the cookie is gone.
    await page.getByRole("button", { name: "Sign out" }).click()
    await page.getByLabel("Admin token or project key").waitFor()
    expect(await context.cookies()).toEqual([])

    // A team signs in with its key: its own project, read-only; another project stays invisible.
    const team = await open()
    await signIn(team.page, secondKey)
    await team.page.getByRole("heading", { name: "checkout" }).waitFor()
    expect(await team.page.locator(".who").textContent()).toBe("Team · production")
    expect(await team.page.getByRole("button", { name: "Create key" }).count()).toBe(0)
    expect(await team.page.getByRole("button", { name: "Save limits" }).count()).toBe(0)
    // The budgets below the project are the operator's (their API is operator only): no column, no ranking.
    expect(await team.page.locator("[data-key-budget]").count()).toBe(0)
    expect(await team.page.getByRole("heading", { name: "Top end users by spend" }).count()).toBe(0)
    await shot(team.page, "team")
    await team.page.goto(`${gw.origin}/dashboard/#/projects/${gw.projectId}`)
    await expect(team.page.getByRole("alert").textContent()).resolves.toContain(`No project with id ${gw.projectId}`)
    await team.page.goto(`${gw.origin}/dashboard/#/projects/${gw.projectId}/requests`)
    await expect(team.page.getByRole("alert").textContent()).resolves.toContain("No project with id")
    await team.context.close()

    expect(problems).toEqual([])
    await context.close()
    console.log(`dashboard browser journey: ${Date.now() - started} ms`)
  }, 120_000)

  it("operator: projects and keys a page at a time (More), and a key rotated on a later page stays in view", async () => {
    const { context, page } = await open()
    // More than one page of each (the API's default page is 25): projects, and keys of the default project.
    const before = (await gw.admin("GET", "/admin/v1/projects?limit=100")).body.data.length
    for (let i = 0; i < 30; i++) await gw.admin("POST", "/admin/v1/projects", { name: `paged ${i}`, budget_credits: 1000, rate_limit: { requests_per_minute: 60 } })
    const keysBefore = (await gw.admin("GET", `/admin/v1/projects/${gw.projectId}/keys?limit=100`)).body.data.length
    for (let i = 0; i < 30; i++) await gw.admin("POST", `/admin/v1/projects/${gw.projectId}/keys`, { environment: "staging" })
    const projects = before + 30
    const keys = keysBefore + 30

    await signIn(page, ADMIN_TOKEN)
    await page.getByRole("heading", { name: "Projects" }).waitFor()
    await expect.poll(() => page.locator("[data-project]").count()).toBe(25)
    await page.getByRole("button", { name: "More projects" }).click()
    await expect.poll(() => page.locator("[data-project]").count()).toBe(Math.min(projects, 50))
    while (await page.getByRole("button", { name: "More projects" }).count() > 0) await page.getByRole("button", { name: "More projects" }).click()
    await expect.poll(() => page.locator("[data-project]").count()).toBe(projects)
    const listed = await page.locator("[data-project]").evaluateAll((cards) => cards.map((c) => c.getAttribute("data-project")))
    expect(new Set(listed).size).toBe(projects)

    await page.goto(`${gw.origin}/dashboard/#/projects/${gw.projectId}`)
    await expect.poll(() => page.locator("[data-key]").count()).toBe(25)
    await page.getByRole("button", { name: "More keys" }).click()
    await expect.poll(() => page.locator("[data-key]").count()).toBe(Math.min(keys, 50))
    // Rotating the last key shown reloads the project: the pages that were open stay, with the new key.
    const last = await page.locator("[data-key]").last().getAttribute("data-key")
    await page.getByRole("button", { name: `Rotate ${last}` }).click()
    await page.getByRole("button", { name: "Rotate key", exact: true }).click()
    await page.getByRole("dialog").getByRole("button", { name: "I have stored it" }).click()
    await expect.poll(() => page.locator(`[data-key="${last}"] .badge-rotated`).count()).toBe(1)
    await expect.poll(() => page.locator("[data-key]").count()).toBe(Math.min(keys + 1, 50))

    expect(problems).toEqual([])
    await context.close()
  }, 120_000)

  it("operator: a capped key's budget bar, an uncapped key's 'no budget', the end-user default and the end users ranked by spend", async () => {
    const { context, page } = await open()
    // A project with a capped key and an uncapped one, an end-user default and one user's own cap.
    const project = (await gw.admin("POST", "/admin/v1/projects", { name: "resale", budget_credits: 20_000, rate_limit: { requests_per_minute: 6000 } })).body
    const capped = (await gw.admin("POST", `/admin/v1/projects/${project.id}/keys`, { environment: "production", budget_credits: 6_000 })).body
    const uncapped = (await gw.admin("POST", `/admin/v1/projects/${project.id}/keys`, { environment: "production" })).body
    expect((await gw.admin("PATCH", `/admin/v1/projects/${project.id}/end_user_budget`, { end_user_budget_credits: 3_000 })).status).toBe(200)
    expect((await gw.admin("PUT", `/admin/v1/projects/${project.id}/end_users/bob`, { budget_credits: 2_000 })).status).toBe(200)

    // Governed calls naming end users, through the gateway against the mock upstream: twelve users
    // (the page shows ten), spending in different amounts; ann and cy spend through the uncapped key too.
    const users = ["ann", "bob", "cy", "dee", "eve", "fay", "gus", "hal", "ivy", "jo", "kim", "lu"]
    const times = [1, 4, 2, 6, 1, 3, 1, 5, 1, 2, 1, 1]
    const ask = (key: string, user: string) =>
      new OpenAI({ baseURL: gw.url, apiKey: key, maxRetries: 0 }).chat.completions.create({ model: "gpt-mini", messages: [{ role: "user", content: "a question" }], user })
    for (const [i, user] of users.entries()) for (let n = 0; n < times[i]!; n++) await ask(capped.secret, user)
    await ask(uncapped.secret, "ann")
    await ask(uncapped.secret, "cy")

    // What the page must show, from the receipts themselves (not from the API the page reads).
    const receipts = gw.query<{ body: string; credits_charged: number }>("SELECT body, credits_charged FROM receipts WHERE project_id = ?", project.id)
      .map((r) => ({ ...(JSON.parse(r.body) as { key_id: string; end_user?: string }), credits: Number(r.credits_charged) }))
    const keySpent = receipts.filter((r) => r.key_id === capped.id).reduce((a, r) => a + r.credits, 0)
    const byUser = new Map<string, number>()
    for (const r of receipts) if (r.end_user !== undefined) byUser.set(r.end_user, (byUser.get(r.end_user) ?? 0) + r.credits)
    const ranked = [...byUser].sort(([a, x], [b, y]) => y - x || (a < b ? -1 : 1)).slice(0, 10)
    expect(keySpent).toBeGreaterThan(0)
    expect(new Set(ranked.map(([, spent]) => spent)).size, "the ranking has distinct amounts to order").toBeGreaterThan(3)
    const figures = (n: number) => n.toLocaleString("en-US")

    await signIn(page, ADMIN_TOKEN)
    await page.getByRole("heading", { name: "Projects" }).waitFor()
    await page.goto(`${gw.origin}/dashboard/#/projects/${project.id}`)
    await page.getByRole("heading", { name: "resale" }).waitFor()

    // The capped key's bar: cap, spent, reserved, remaining of its window; the uncapped key has none.
    const keyCell = page.locator(`[data-key-budget="${capped.id}"]`)
    await keyCell.locator('[data-budget="spent"]').waitFor()
    expect(await keyCell.locator("[data-budget]").evaluateAll((els) => els.map((e) => [e.getAttribute("data-budget"), e.textContent]))).toEqual([
      ["spent", figures(keySpent)], ["reserved", "0"], ["remaining", figures(6_000 - keySpent)], ["cap", "6,000"]
    ])
    expect(await keyCell.getByRole("img").getAttribute("aria-label")).toBe(`Key ${capped.id}'s budget: ${figures(keySpent)} of 6,000 Credits spent, 0 reserved, ${figures(6_000 - keySpent)} remaining`)
    expect(Number(await keyCell.locator(".bar-spent").getAttribute("data-pct"))).toBeCloseTo((keySpent / 6_000) * 100, 1)
    await expect(page.locator(`[data-key-budget="${uncapped.id}"]`).textContent()).resolves.toBe("no budget")

    // The end-user default, and the ten who spent most, most first, with their amounts and caps.
    await expect(page.locator('[data-field="end-user-default"]').textContent()).resolves.toContain("3,000 Credits a month")
    const table = page.locator('[data-table="end-users"]')
    await table.waitFor()
    const rows = await table.locator("tbody tr").evaluateAll((trs) =>
      trs.map((tr) => [tr.getAttribute("data-end-user"), tr.querySelector('[data-field="end-user-spent"]')!.textContent, tr.querySelector('[data-field="end-user-cap"]')!.textContent])
    )
    expect(rows).toEqual(ranked.map(([user, spent]) => [user, figures(spent), user === "bob" ? "2,000 (own)" : "3,000 (project default)"]))
    const bob = table.locator('[data-end-user="bob"]')
    await expect(bob.locator('[data-budget="remaining"]').textContent()).resolves.toBe(figures(2_000 - byUser.get("bob")!))
    await page.evaluate('document.getElementById("keys-h").scrollIntoView()')
    await shot(page, "budgets", false)

    expect(problems).toEqual([])
    await context.close()
  }, 120_000)

  it("a page opened right after signing in stays open: the start page's redirect, run after the paint, reads where the page is then", async () => {
    // The redirect from the bare address to the start page is an effect, run after the browser
    // paints. Playwright's fake clock holds the paint timers, so the address moves on in between
    // (as a bookmark or a link followed at once does); when the page re-renders, Preact runs the
    // held effect first. It used to redirect from the address its render saw (none), so the
    // project's page opened and was replaced by the projects list.
    const { context, page } = await open()
    const projects = (await (await fetch(`${gw.origin}/admin/v1/projects`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).json()) as { data: Array<{ id: string; name: string }> }
    const project = projects.data[0]!
    await page.clock.install()
    await page.goto(`${gw.origin}/dashboard/`)
    await page.getByLabel("Admin token or project key").fill(ADMIN_TOKEN)
    await page.clock.pauseAt(Date.now() + 60_000)
    await page.getByRole("button", { name: "Sign in" }).click()
    await page.getByRole("button", { name: "Sign in" }).waitFor({ state: "detached" })
    await page.evaluate(`location.hash = ${JSON.stringify(`#/projects/${project.id}`)}`)
    // The re-render has happened (the project page waits for its own load, an effect held too).
    await page.getByRole("status").filter({ hasText: "Loading…" }).waitFor()
    await page.clock.resume()
    await page.locator("main h1").waitFor()
    expect(await page.locator("main h1").textContent()).toBe(project.name)
    await page.getByRole("heading", { name: "Verify a month's bill" }).waitFor()
    expect(new URL(page.url()).hash).toBe(`#/projects/${project.id}`)
    expect(await page.getByRole("heading", { level: 1 }).textContent()).toBe(project.name)
    expect(problems).toEqual([])
    await context.close()
  }, 60_000)

  it("an expired session sends the page back to sign-in", async () => {
    const short = await startGateway(mockGatewayFile(upstream.url), { sessionTtlMs: 1500 })
    const context = await browser.newContext()
    try {
      const page = await context.newPage()
      // Keyboard only: the sign-in screen focuses its field, Enter submits.
      await page.goto(`${short.origin}/dashboard/`)
      await expect.poll(() => page.evaluate("document.activeElement.id")).toBe("token")
      await page.keyboard.type(ADMIN_TOKEN)
      await page.keyboard.press("Enter")
      await page.getByRole("heading", { name: "Projects" }).waitFor()
      await new Promise((r) => setTimeout(r, 1700))
      await page.getByRole("link", { name: "default" }).click()
      await page.getByRole("status").filter({ hasText: "Your session has ended" }).waitFor()
      await page.getByLabel("Admin token or project key").waitFor()
    } finally {
      await context.close()
      await short.close()
    }
  }, 60_000)
})
