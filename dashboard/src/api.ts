/**
 * The dashboard's only way to the server: the documented admin API and public endpoints
 * (/openapi.json). The session lives in an HttpOnly cookie the page cannot read; the CSRF token is
 * kept in this module's memory only (never in storage or a URL) and sent on every write.
 */

import type { Schema } from "effect"
import type * as A from "../../src/domain/wire/admin.ts"
import type * as R from "../../src/domain/wire/records.ts"
import type * as S from "../../src/domain/wire/scopes.ts"
import type { StatementSchema } from "../../src/http/receiptsApi.ts"
import type * as B from "../../src/http/scopeBudgetsApi.ts"

// Every shape below is the encoded form (what the JSON carries) of the schema that serves it and
// /openapi.json (src/domain/wire/): imported as types only, so none of Effect reaches the bundle, and
// `npm run typecheck` (tsc -p dashboard) fails where the dashboard reads a field the API changed.
// test/dashboard/wireTypes.test.ts holds that no wire shape is written here by hand.
type Wire<S extends Schema.Schema.Any> = Schema.Schema.Encoded<S>

export type Session = Wire<typeof A.SessionInfo>

export type Environment = Wire<typeof A.Environment>
/** Every environment, in the API's order; `satisfies` and the check below keep it equal to the schema's literals. */
export const ENVIRONMENTS = ["development", "staging", "production"] as const satisfies ReadonlyArray<Environment>
type Exhaustive<T extends never> = T
export type _EveryEnvironmentListed = Exhaustive<Exclude<Environment, (typeof ENVIRONMENTS)[number]>>

export type Window = Wire<typeof A.BudgetWindow>
export type ApiKey = Wire<typeof A.ApiKey>
/** A project in the list (GET /admin/v1/projects). */
export type ProjectSummary = Wire<typeof A.ProjectSummary>
/** One project (GET, POST, PATCH): its window and the first page of its keys. */
export type Project = Wire<typeof A.Project>
export type IssuedKey = Wire<typeof A.IssuedKey>
export type RotatedKey = Wire<typeof A.RotatedKey>
export type NewProject = Wire<typeof A.NewProject>
export type ProjectPatch = Wire<typeof A.ProjectPatch>
export type RequestEntry = Wire<typeof A.RequestListItem>
export type ReceiptView = Wire<typeof A.ReceiptView>
export type Receipt = Wire<typeof R.Receipt>
export type Usage = Wire<typeof A.DailyUsage>
/** A key's budget and its current window (budget_credits null: none). */
export type KeyBudget = Wire<typeof S.KeyBudget>
/** An end user of a project, the cap that applies to it (its own, the project's default, none) and its current window. */
export type EndUser = Wire<typeof S.EndUser>
export type EndUserDefault = Wire<typeof B.EndUserDefault>
export type PublicKey = Wire<typeof R.ReceiptKeys>["data"][number]

/** A page of an admin list (every list answers `listPage`'s shape): pass next_cursor as cursor for the next one. */
export type Page<T> = Omit<Wire<typeof A.ApiKeyList>, "data"> & { readonly data: ReadonlyArray<T> }

export type RequestPage = Wire<typeof A.RequestPage>

export class ApiError extends Error {
  constructor(readonly status: number, readonly code: string | null, message: string) {
    super(message)
  }
}

let csrfToken: string | null = null

/** Called with every 401 outside sign-in: the session ended (expired, signed out elsewhere, key revoked). */
let onSessionLost: (message: string) => void = () => {}
export const whenSessionLost = (f: (message: string) => void) => {
  onSessionLost = f
}

export const call = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
  const headers: Record<string, string> = { accept: "application/json" }
  if (body !== undefined) headers["content-type"] = "application/json"
  if (method !== "GET" && csrfToken !== null) headers["x-csrf-token"] = csrfToken
  const res = await fetch(path, { method, headers, credentials: "same-origin", cache: "no-store", ...(body === undefined ? {} : { body: JSON.stringify(body) }) })
  const data = (await res.json().catch(() => null)) as { error?: { message?: string; code?: string | null } } | null
  if (!res.ok) {
    const error = new ApiError(res.status, data?.error?.code ?? null, data?.error?.message ?? `${res.status} ${res.statusText}`)
    if (res.status === 401 && path !== "/admin/v1/session") onSessionLost(error.message)
    throw error
  }
  return data as T
}

const q = (params: Record<string, string | undefined | null>) => {
  const s = new URLSearchParams()
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") s.set(k, v)
  const text = s.toString()
  return text === "" ? "" : `?${text}`
}

const remember = (s: Session): Session => {
  csrfToken = s.csrf_token
  return s
}

export const api = {
  signIn: (token: string) => call<Session>("POST", "/admin/v1/session", { token }).then(remember),
  session: () => call<Session>("GET", "/admin/v1/session").then(remember),
  signOut: () =>
    call<unknown>("DELETE", "/admin/v1/session").finally(() => {
      csrfToken = null
    }),
  projects: (cursor: string | null) => call<Page<ProjectSummary>>("GET", `/admin/v1/projects${q({ cursor })}`),
  keys: (projectId: string, cursor: string | null) => call<Page<ApiKey>>("GET", `/admin/v1/projects/${encodeURIComponent(projectId)}/keys${q({ cursor })}`),
  project: (id: string) => call<Project>("GET", `/admin/v1/projects/${encodeURIComponent(id)}`),
  createProject: (body: NewProject) => call<Project>("POST", "/admin/v1/projects", body),
  updateProject: (id: string, body: ProjectPatch) =>
    call<Project>("PATCH", `/admin/v1/projects/${encodeURIComponent(id)}`, body),
  createKey: (projectId: string, environment: Environment) => call<IssuedKey>("POST", `/admin/v1/projects/${encodeURIComponent(projectId)}/keys`, { environment }),
  rotateKey: (keyId: string, graceSeconds: number) => call<RotatedKey>("POST", `/admin/v1/keys/${encodeURIComponent(keyId)}/rotate`, { grace_seconds: graceSeconds }),
  revokeKey: (keyId: string) => call<Wire<typeof A.KeyInfo>>("POST", `/admin/v1/keys/${encodeURIComponent(keyId)}/revoke`),
  usage: (projectId: string, period: string, environment?: string) =>
    call<Usage>("GET", `/admin/v1/projects/${encodeURIComponent(projectId)}/usage${q({ period, environment })}`),
  requests: (projectId: string, filter: { environment?: string; status?: string; model?: string; q?: string; cursor?: string | null; limit?: string }) =>
    call<RequestPage>("GET", `/admin/v1/projects/${encodeURIComponent(projectId)}/requests${q(filter)}`),
  request: (projectId: string, requestId: string) =>
    call<RequestEntry>("GET", `/admin/v1/projects/${encodeURIComponent(projectId)}/requests/${encodeURIComponent(requestId)}`),
  receipt: (projectId: string, requestId: string) =>
    call<ReceiptView>("GET", `/admin/v1/projects/${encodeURIComponent(projectId)}/requests/${encodeURIComponent(requestId)}/receipt`),
  /** Every key of the project that has a budget, with its current window (all pages: keys with a budget are few). */
  keyBudgets: async (projectId: string): Promise<ReadonlyArray<KeyBudget>> => {
    const all: Array<KeyBudget> = []
    let cursor: string | null = null
    do {
      const page: Wire<typeof B.KeyBudgetList> = await call("GET", `/admin/v1/projects/${encodeURIComponent(projectId)}/key_budgets${q({ cursor, limit: "100" })}`)
      all.push(...page.data)
      cursor = page.next_cursor
    } while (cursor !== null)
    return all
  },
  endUserDefault: (projectId: string) => call<EndUserDefault>("GET", `/admin/v1/projects/${encodeURIComponent(projectId)}/end_user_budget`),
  /** The end users that spent most in the project's current window, most first. */
  topEndUsers: (projectId: string, limit: number) =>
    call<Wire<typeof S.EndUserList>>("GET", `/admin/v1/projects/${encodeURIComponent(projectId)}/end_users${q({ order: "spent", limit: String(limit) })}`),
  receiptKeys: () => call<Wire<typeof R.ReceiptKeys>>("GET", "/v1/receipts/keys").then((r) => r.data),
  /** A period's receipt export (JSON Lines), every page (x-next-cursor) concatenated: one file for `tollgate verify`. */
  exportReceipts: async (projectId: string, period: string): Promise<string> => {
    let text = ""
    let cursor: string | null = null
    do {
      const res: Response = await fetch(`/admin/v1/projects/${encodeURIComponent(projectId)}/receipts${q({ period, cursor })}`, { credentials: "same-origin", cache: "no-store" })
      if (!res.ok) throw new ApiError(res.status, null, `export: ${res.status} ${res.statusText}`)
      text += await res.text()
      cursor = res.headers.get("x-next-cursor")
    } while (cursor !== null && cursor !== "")
    return text
  },
  /** A closed period's signed statement (the body GET /v1/statements/{period} serves); 404 while the period is open. */
  statement: (projectId: string, period: string) =>
    call<Statement>("GET", `/admin/v1/projects/${encodeURIComponent(projectId)}/statements/${encodeURIComponent(period)}`)
}

/** A closed period's signed statement, as served (spec/statement.ts). */
export type Statement = Wire<typeof StatementSchema>
