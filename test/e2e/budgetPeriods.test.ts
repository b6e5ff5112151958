/**
 * Budget periods (issue 41, item 2): a project's caps count in windows of its `budget_period` (month,
 * week, day, total) in its `time_zone`, the window of a call decided by its start (spec/periods.ts).
 * Through the admin API and the `openai` client, against a gateway whose Effect Clock the test sets:
 *   - a day window in Pacific/Kiritimati (UTC+14): the cap binds inside it (402 naming project) and a
 *     call one second after local midnight is in a fresh window, its receipt naming the new day;
 *   - usage reads the project's own windows, and a month label is refused for a day project;
 *   - bad periods and zones are 400s naming the field, and `total` is one window whatever the clock.
 */
import { HttpServer } from "@effect/platform"
import { Clock, Duration, Effect, Layer, Option, Redacted } from "effect"
import OpenAI, { APIError } from "openai"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { windowBounds, windowOf } from "../../spec/periods.ts"
import { ServerLive } from "../../src/server.ts"
import { ADMIN_TOKEN, mockGatewayFile } from "../support/gateway.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { freshSchema, testOnPostgres } from "../support/pg.ts"
import { testRuntime } from "../support/runtime.ts"

/** Effect's clock at `at()`: the test moves it (sleeps are the real ones). */
const settable = (at: () => number): Clock.Clock => {
  const real = Clock.make()
  return {
    [Clock.ClockTypeId]: Clock.ClockTypeId,
    unsafeCurrentTimeMillis: at,
    currentTimeMillis: Effect.sync(at),
    unsafeCurrentTimeNanos: () => BigInt(at()) * 1_000_000n,
    currentTimeNanos: Effect.sync(() => BigInt(at()) * 1_000_000n),
    sleep: (d: Duration.DurationInput) => real.sleep(Duration.decode(d))
  }
}

const ZONE = "Pacific/Kiritimati"
// A day in that zone, and the instant 10 s before its end (its local 23:59:50).
const day = windowOf("day", ZONE, Date.now())
const dayEnd = windowBounds("day", ZONE, day)!.endMillis

describe("budget periods: a project's windows in its period and zone", () => {
  let now = dayEnd - 10_000
  let upstream: MockUpstream
  let origin = ""
  let dispose: () => Promise<void> = async () => {}
  const dir = mkdtempSync(join(tmpdir(), "tollgate-periods-"))
  // On the e2e-pg run, a fresh PostgreSQL schema (and the receipt key in a file, as there).
  const schema = testOnPostgres ? freshSchema() : undefined

  const admin = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${origin}${path}`, {
      method,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) })
    })
    return { status: res.status, body: (await res.json()) as any }
  }
  const projectWith = async (fields: Record<string, unknown>, budget: number) => {
    const p = await admin("POST", "/admin/v1/projects", { name: "periods", budget_credits: budget, rate_limit: { requests_per_minute: 6000 }, ...fields })
    expect(p.status, JSON.stringify(p.body)).toBe(201)
    const k = await admin("POST", `/admin/v1/projects/${p.body.id}/keys`, { environment: "development" })
    return { project: p.body, client: new OpenAI({ baseURL: `${origin}/v1`, apiKey: k.body.secret, maxRetries: 0 }), key: k.body.secret as string, keyId: k.body.id as string }
  }
  const call = (client: OpenAI) => client.chat.completions.create({ model: "gpt-test", messages: [{ role: "user", content: "hi" }], max_tokens: 4 })

  beforeAll(async () => {
    upstream = await startMockUpstream()
    const runtime = testRuntime(ServerLive.pipe(Layer.provide(Layer.setClock(settable(() => now)))), {
      databaseUrl: schema?.url ?? `sqlite:${join(dir, "tollgate.db")}`,
      receiptKeyFile: schema === undefined ? Option.none() : Option.some(join(dir, "receipt-signing-key.pem")),
      adminToken: Option.some(Redacted.make(ADMIN_TOKEN)),
      gateway: mockGatewayFile(upstream.url)
    })
    const port = await runtime.runPromise(Effect.map(HttpServer.HttpServer, (s) => (s.address._tag === "TcpAddress" ? s.address.port : 0)))
    origin = `http://127.0.0.1:${port}`
    dispose = () => runtime.dispose()
  })
  afterAll(async () => {
    await dispose()
    await upstream?.close()
    schema?.drop()
    rmSync(dir, { recursive: true, force: true })
  })

  it("a day window in the project's zone: the cap binds inside it, and one second past local midnight is a fresh window", async () => {
    now = dayEnd - 10_000
    // One call's price first, on a roomy project of the same shape.
    const probe = await projectWith({ budget_period: "day", time_zone: ZONE }, 1_000_000)
    const charge = ((await call(probe.client)) as any).governance.credits_charged as number
    const { project, client, keyId } = await projectWith({ budget_period: "day", time_zone: ZONE }, charge * 2)
    expect([project.budget_period, project.time_zone, project.current_window.period]).toEqual(["day", ZONE, day])
    await call(client)
    await call(client)
    const refused = await call(client).catch((e: unknown) => e)
    expect([(refused as APIError).status, (refused as any).error?.param]).toEqual([402, "project"])
    // Local midnight passes: the next call is in the next day's window, with the whole cap.
    now = dayEnd + 1_000
    const next = windowOf("day", ZONE, now)
    expect(next).not.toBe(day)
    const admitted = await call(client)
    const receipt = await (await fetch(`${origin}/v1/requests/${(admitted as any).governance.request_id}/receipt`, { headers: { authorization: `Bearer ${(client as any).apiKey}` } })).json() as any
    expect(receipt.period).toBe(next)
    const view = await admin("GET", `/admin/v1/projects/${project.id}`)
    expect(view.body.current_window).toMatchObject({ period: next, spent: charge, budget_credits: charge * 2 })
    // The key's and an end user's budget views read the same window.
    const keyBudget = await admin("PATCH", `/admin/v1/keys/${keyId}`, { budget_credits: charge * 10 })
    expect([keyBudget.status, keyBudget.body.period, keyBudget.body.spent]).toEqual([200, next, charge])
    expect((await admin("GET", `/admin/v1/projects/${project.id}/end_users/nobody`)).body.period).toBe(next)
    // Usage reads the project's own windows: yesterday's two calls, today's one; a month label is refused.
    const usage = async (q: string) => (await fetch(`${origin}/v1/usage${q}`, { headers: { authorization: `Bearer ${(client as any).apiKey}` } }))
    expect(((await (await usage("")).json()) as any)).toMatchObject({ period: next, requests: 1 })
    expect(((await (await usage(`?period=${day}`)).json()) as any)).toMatchObject({ period: day, requests: 2, budget: { spent: charge * 2 } })
    const month = await usage(`?period=${day.slice(0, 7)}`)
    expect([month.status, ((await month.json()) as any).error.param]).toEqual([400, "period"])
  })

  it("total: one window whatever the clock says", async () => {
    now = Date.parse("2031-01-01T00:00:00Z")
    const { project, client } = await projectWith({ budget_period: "total" }, 1_000_000)
    expect(project.current_window.period).toBe("total")
    await call(client)
    now = Date.parse("2040-06-15T12:00:00Z")
    await call(client)
    const view = await admin("GET", `/admin/v1/projects/${project.id}`)
    expect(view.body.current_window.period).toBe("total")
    expect(view.body.current_window.spent).toBeGreaterThan(0)
    const changed = await admin("PATCH", `/admin/v1/projects/${project.id}`, { budget_period: "week", time_zone: "Europe/Paris" })
    expect([changed.status, changed.body.budget_period, changed.body.current_window.period]).toEqual([200, "week", windowOf("week", "Europe/Paris", now)])
  })

  it("a period or zone it does not know is a 400 naming the field; nothing is written", async () => {
    const bad: Array<[Record<string, unknown>, string]> = [
      [{ budget_period: "fortnight" }, "budget_period"],
      [{ budget_period: 7 }, "budget_period"],
      [{ time_zone: "Mars/Olympus_Mons" }, "time_zone"],
      [{ time_zone: "" }, "time_zone"],
      [{ time_zone: "x".repeat(10_000) }, "time_zone"]
    ]
    const before = (await admin("GET", "/admin/v1/projects?limit=100")).body.data.length
    for (const [fields, param] of bad) {
      const res = await admin("POST", "/admin/v1/projects", { name: "bad", budget_credits: 10, rate_limit: { requests_per_minute: 60 }, ...fields })
      expect([res.status, res.body.error?.param], JSON.stringify(fields)).toEqual([400, param])
      expect(JSON.stringify(res.body).length).toBeLessThan(1_000)
    }
    expect((await admin("GET", "/admin/v1/projects?limit=100")).body.data.length).toBe(before)
  })
})
