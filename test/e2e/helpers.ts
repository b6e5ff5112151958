/**
 * Shared helpers for the end-to-end suite: an OpenAI SDK client that records every status it sees
 * (so a file can assert "no 500 anywhere"), OpenAI error-body assertions, admin shortcuts and
 * read-only views of the store.
 */
import OpenAI, { APIError } from "openai"
import { expect } from "vitest"
import type { TestGateway } from "../support/gateway.ts"

/** Every HTTP status a file's clients received, in order. */
export type StatusLog = Array<number>

/** An OpenAI SDK client on the gateway with the given key; no retries; statuses go to `log`. */
export const clientFor = (gw: TestGateway, apiKey: string, log?: StatusLog): OpenAI =>
  new OpenAI({
    baseURL: gw.url,
    apiKey,
    maxRetries: 0,
    fetch: async (input: string | URL | Request, init?: RequestInit) => {
      const res = await fetch(input, init)
      log?.push(res.status)
      return res
    }
  })

/** A raw HTTP call on the gateway (for what the SDK cannot send: bad JSON, no body, exact bytes). */
export const raw = async (
  gw: TestGateway,
  path: string,
  opts: { method?: string; key?: string | undefined; body?: string | undefined; headers?: Record<string, string> } = {},
  log?: StatusLog
): Promise<Response> => {
  const headers: Record<string, string> = { "content-type": "application/json", ...opts.headers }
  if (opts.key !== undefined) headers.authorization = `Bearer ${opts.key}`
  const res = await fetch(`${gw.origin}${path}`, {
    method: opts.method ?? (opts.body === undefined ? "GET" : "POST"),
    headers,
    ...(opts.body === undefined ? {} : { body: opts.body })
  })
  log?.push(res.status)
  return res
}

export interface ExpectedError {
  readonly status: number
  readonly code: string
  readonly type?: string
  /** Checked when given (null included). */
  readonly param?: string | null
  /** The response must carry `x-should-retry: false`. */
  readonly noRetry?: boolean
  readonly message?: RegExp
}

const checkErrorObject = (error: unknown, want: ExpectedError): void => {
  expect(error).toBeTypeOf("object")
  const e = error as Record<string, unknown>
  expect(Object.keys(e).sort()).toEqual(["code", "message", "param", "type"])
  expect(e.code).toBe(want.code)
  expect(e.message).toBeTypeOf("string")
  expect((e.message as string).length).toBeGreaterThan(10)
  expect(e.type).toBeTypeOf("string")
  if (want.type !== undefined) expect(e.type).toBe(want.type)
  if (want.param !== undefined) expect(e.param).toBe(want.param)
  else expect(e.param === null || typeof e.param === "string").toBe(true)
  if (want.message !== undefined) expect(e.message).toMatch(want.message)
}

/** The SDK call must fail with exactly this OpenAI error; returns the SDK error for further checks. */
export const expectApiError = async (call: PromiseLike<unknown>, want: ExpectedError): Promise<APIError> => {
  const outcome = await Promise.resolve(call).then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error })
  )
  if (outcome.ok) throw new Error(`expected ${want.status} ${want.code}, the call succeeded: ${JSON.stringify(outcome.value).slice(0, 300)}`)
  const err = outcome.error
  if (!(err instanceof APIError)) throw err
  expect(err.status).toBe(want.status)
  checkErrorObject(err.error, want)
  if (want.noRetry === true) expect(err.headers?.get("x-should-retry")).toBe("false")
  expect(err.headers?.get("content-type") ?? "").toMatch(/application\/json/)
  return err
}

/** A raw response must be exactly `{"error": {...}}` with this code. Returns the parsed body. */
export const expectWireError = async (res: Response, want: ExpectedError): Promise<{ error: Record<string, unknown> }> => {
  expect(res.status).toBe(want.status)
  expect(res.headers.get("content-type") ?? "").toMatch(/application\/json/)
  const body = (await res.json()) as { error: Record<string, unknown> }
  expect(Object.keys(body)).toEqual(["error"])
  checkErrorObject(body.error, want)
  if (want.noRetry === true) expect(res.headers.get("x-should-retry")).toBe("false")
  return body
}

/** The `governance` object a governed JSON response (or final stream chunk) carries. */
export interface Governance {
  request_id: string
  status: string
  verification: { state: string; checks: Array<string>; failed_checks?: Array<string> }
  credits_charged: number
  rate_card_version: string
  receipt_id: string
}

export const governanceOf = (x: unknown): Governance => {
  const g = (x as { governance?: Governance }).governance
  if (g === undefined) throw new Error(`no governance in ${JSON.stringify(x).slice(0, 300)}`)
  return g
}

/** A new project and a key for it, through the admin API. */
export const newProject = async (
  gw: TestGateway,
  opts: { name?: string; budget?: number; rpm?: number; burst?: number; environment?: string } = {}
): Promise<{ projectId: string; organization: string; key: string; keyId: string }> => {
  const created = await gw.admin("POST", "/admin/v1/projects", {
    name: opts.name ?? "e2e",
    budget_credits: opts.budget ?? 1_000_000,
    rate_limit: { requests_per_minute: opts.rpm ?? 6000, burst: opts.burst ?? 600 }
  })
  expect(created.status).toBe(201)
  const projectId = created.body.id as string
  expect(projectId).toMatch(/^prj_/)
  const key = await newKey(gw, projectId, opts.environment ?? "development")
  return { projectId, organization: created.body.organization as string, key: key.secret, keyId: key.id }
}

export const newKey = async (gw: TestGateway, projectId: string, environment = "development"): Promise<{ id: string; secret: string }> => {
  const res = await gw.admin("POST", `/admin/v1/projects/${projectId}/keys`, { environment })
  expect(res.status).toBe(201)
  return { id: res.body.id as string, secret: res.body.secret as string }
}

// ---- read-only views of the store ----

export const dbAll = <T = Record<string, unknown>>(gw: TestGateway, sqlText: string, ...params: Array<unknown>): Array<T> =>
  gw.query<T>(sqlText, ...params)

export const dbGet = <T = Record<string, unknown>>(gw: TestGateway, sqlText: string, ...params: Array<unknown>): T | undefined =>
  gw.query<T>(sqlText, ...params)[0]

export interface LedgerState {
  readonly cap: number
  readonly spent: number
  readonly reserved: number
  readonly receipts: number
  readonly receiptSum: number
  readonly reservations: Record<string, number>
  readonly requests: Record<string, number>
  readonly idempotency: number
}

/** Everything governance wrote for a project, summed over all its windows. */
export const ledgerState = (gw: TestGateway, projectId: string): LedgerState => {
  if (gw.engine === "pg") return ledgerStatePg(gw, projectId)
  const cap = dbGet<{ c: number }>(gw, "SELECT budget_credits AS c FROM projects WHERE id = ?", projectId)?.c ?? -1
  const w = dbGet<{ spent: number | null; reserved: number | null }>(
    gw,
    "SELECT SUM(spent) AS spent, SUM(reserved) AS reserved FROM budget_windows WHERE project_id = ?",
    projectId
  )
  const r = dbGet<{ n: number; s: number | null }>(gw, "SELECT COUNT(*) AS n, SUM(credits_charged) AS s FROM receipts WHERE project_id = ?", projectId)
  const byState = (table: string, column: string) =>
    Object.fromEntries(
      dbAll<{ k: string; n: number }>(gw, `SELECT ${column} AS k, COUNT(*) AS n FROM ${table} WHERE project_id = ? GROUP BY ${column}`, projectId).map((x) => [x.k, x.n])
    )
  return {
    cap,
    spent: w?.spent ?? 0,
    reserved: w?.reserved ?? 0,
    receipts: r?.n ?? 0,
    receiptSum: r?.s ?? 0,
    reservations: byState("reservations", "state"),
    requests: byState("requests", "status"),
    idempotency: dbGet<{ n: number }>(gw, "SELECT COUNT(*) AS n FROM idempotency WHERE project_id = ?", projectId)?.n ?? 0
  }
}

/** The same, in ONE read (each read of a PostgreSQL store here is a `psql` process: ≈ 40 ms). */
const ledgerStatePg = (gw: TestGateway, projectId: string): LedgerState => {
  const p = `'${projectId.replace(/'/g, "''")}'`
  const byState = (table: string, column: string) =>
    `(SELECT COALESCE(json_object_agg(k, n), '{}') FROM (SELECT ${column} AS k, COUNT(*) AS n FROM ${table} WHERE project_id = ${p} GROUP BY ${column}) x)`
  const row = gw.query<Omit<LedgerState, "cap"> & { cap: number | null }>(`SELECT
      (SELECT budget_credits FROM projects WHERE id = ${p}) AS cap,
      (SELECT COALESCE(SUM(spent), 0) FROM budget_windows WHERE project_id = ${p}) AS spent,
      (SELECT COALESCE(SUM(reserved), 0) FROM budget_windows WHERE project_id = ${p}) AS reserved,
      (SELECT COUNT(*) FROM receipts WHERE project_id = ${p}) AS receipts,
      (SELECT COALESCE(SUM(credits_charged), 0) FROM receipts WHERE project_id = ${p}) AS "receiptSum",
      ${byState("reservations", "state")} AS reservations,
      ${byState("requests", "status")} AS requests,
      (SELECT COUNT(*) FROM idempotency WHERE project_id = ${p}) AS idempotency`)[0]!
  return { ...row, cap: row.cap ?? -1 }
}

export interface ReservationRow {
  id: string
  request_id: string
  amount: number
  state: string
  charge: number | null
}

export const reservationOf = (gw: TestGateway, requestId: string): ReservationRow | undefined =>
  dbGet<ReservationRow>(gw, "SELECT id, request_id, amount, state, charge FROM reservations WHERE request_id = ?", requestId)

/** Poll the store until `check` holds (the gateway settles some things after the client is gone). */
export const eventually = async <T>(probe: () => T, check: (t: T) => boolean, what: string, timeoutMs = 10_000): Promise<T> => {
  const start = Date.now()
  for (;;) {
    const value = probe()
    if (check(value)) return value
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}; last value ${JSON.stringify(value)}`)
    await new Promise((r) => setTimeout(r, 20))
  }
}

/** No response of the file was a 500 (or any 5xx other than the documented 503). */
export const expectNoServerErrors = (log: StatusLog): void => {
  expect(log.length).toBeGreaterThan(0)
  expect(log.filter((s) => s >= 500 && s !== 503)).toEqual([])
}
