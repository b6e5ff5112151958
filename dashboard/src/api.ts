/**
 * The dashboard's only way to the server: the documented admin API and public endpoints
 * (/openapi.json). The session lives in an HttpOnly cookie the page cannot read; the CSRF token is
 * kept in this module's memory only (never in storage or a URL) and sent on every write.
 */

export interface Session {
  readonly role: "operator" | "team"
  readonly project_id: string | null
  readonly environment: Environment | null
  readonly csrf_token: string
  readonly expires_at: string
}

export type Environment = "development" | "staging" | "production"
export const ENVIRONMENTS: ReadonlyArray<Environment> = ["development", "staging", "production"]

export interface Window {
  readonly period: string
  readonly budget_credits: number
  readonly spent: number
  readonly reserved: number
  readonly remaining: number
}

export interface ApiKey {
  readonly id: string
  readonly environment: Environment
  readonly status: "active" | "rotated" | "expired" | "revoked"
  readonly created_at: string
  readonly expires_at: string | null
  readonly revoked_at: string | null
  readonly replaces: string | null
  readonly replaced_by: string | null
  readonly last_used_at: string | null
}

export interface Project {
  readonly id: string
  readonly organization: string
  readonly name: string
  readonly budget_credits: number
  readonly rate_limit: { readonly requests_per_minute: number; readonly burst: number }
  readonly current_window: Window
  /** The first page of keys (GET one project); the rest from the keys list. */
  readonly keys?: ReadonlyArray<ApiKey>
  readonly keys_has_more?: boolean
}

export interface IssuedKey {
  readonly id: string
  readonly environment: Environment
  readonly secret: string
  readonly replaces?: string
  readonly old_key_expires_at?: string
}

export interface Attempt {
  readonly route: string
  readonly provider: string
  readonly outcome: string
  readonly status?: number
  readonly error?: string
  readonly duration_ms: number
}

export interface RequestEntry {
  readonly id: string
  readonly status: "pending" | "completed" | "failed"
  readonly endpoint: string
  readonly model: string
  readonly route: string | null
  readonly stream: boolean
  readonly verification: { readonly state: string; readonly checks: ReadonlyArray<string>; readonly failed_checks: ReadonlyArray<string> } | null
  readonly credits_reserved: number
  readonly credits_charged: number | null
  readonly rate_card_version: string | null
  readonly receipt_id: string | null
  readonly attempts: ReadonlyArray<Attempt>
  readonly error: { readonly code: string; readonly message: string | null } | null
  readonly created_at: string
  readonly completed_at: string | null
  readonly environment: Environment
  readonly key_id: string
  readonly idempotency_key: string | null
}

/** A page of an admin list: pass next_cursor as cursor for the next one. */
export interface Page<T> {
  readonly data: ReadonlyArray<T>
  readonly has_more: boolean
  readonly next_cursor: string | null
}

export type RequestPage = Page<RequestEntry>

export interface Receipt {
  readonly receipt_id: string
  readonly request_id: string
  readonly project_id: string
  readonly environment: string
  readonly model: string
  readonly route: string
  readonly rate_card_version: string
  readonly credits_charged: number
  readonly credits_reserved: number
  readonly tokens: Record<string, number>
  readonly seq: number
  readonly period: string
  readonly created_at: string
  readonly prev_hash: string
  readonly signing_key_id: string
  readonly hash: string
  readonly signature: string
  readonly [field: string]: unknown
}

export interface ChainLink {
  readonly seq: number
  readonly request_id: string
  readonly environment: string
  readonly hash: string
}

export interface ReceiptView {
  readonly receipt: Receipt
  readonly previous: ChainLink | null
  readonly next: ChainLink | null
}

export interface Usage {
  readonly period: string
  readonly environment: Environment | null
  readonly budget: Window
  readonly days: ReadonlyArray<{ readonly date: string; readonly model: string; readonly requests: number; readonly credits: number }>
  readonly receipts: number
  readonly receipts_credits: number
}

export interface PublicKey {
  readonly id: string
  readonly algorithm: "Ed25519"
  readonly public_key: string
}

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

const call = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
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
  projects: (cursor: string | null) => call<Page<Project>>("GET", `/admin/v1/projects${q({ cursor })}`),
  keys: (projectId: string, cursor: string | null) => call<Page<ApiKey>>("GET", `/admin/v1/projects/${encodeURIComponent(projectId)}/keys${q({ cursor })}`),
  project: (id: string) => call<Project>("GET", `/admin/v1/projects/${encodeURIComponent(id)}`),
  createProject: (body: { name: string; budget_credits: number; rate_limit: { requests_per_minute: number; burst?: number } }) =>
    call<Project>("POST", "/admin/v1/projects", body),
  updateProject: (id: string, body: { budget_credits?: number; rate_limit?: { requests_per_minute?: number; burst?: number } }) =>
    call<Project>("PATCH", `/admin/v1/projects/${encodeURIComponent(id)}`, body),
  createKey: (projectId: string, environment: Environment) => call<IssuedKey>("POST", `/admin/v1/projects/${encodeURIComponent(projectId)}/keys`, { environment }),
  rotateKey: (keyId: string, graceSeconds: number) => call<IssuedKey>("POST", `/admin/v1/keys/${encodeURIComponent(keyId)}/rotate`, { grace_seconds: graceSeconds }),
  revokeKey: (keyId: string) => call<ApiKey>("POST", `/admin/v1/keys/${encodeURIComponent(keyId)}/revoke`),
  usage: (projectId: string, period: string, environment?: string) =>
    call<Usage>("GET", `/admin/v1/projects/${encodeURIComponent(projectId)}/usage${q({ period, environment })}`),
  requests: (projectId: string, filter: { environment?: string; status?: string; model?: string; q?: string; cursor?: string | null; limit?: string }) =>
    call<RequestPage>("GET", `/admin/v1/projects/${encodeURIComponent(projectId)}/requests${q(filter)}`),
  request: (projectId: string, requestId: string) =>
    call<RequestEntry>("GET", `/admin/v1/projects/${encodeURIComponent(projectId)}/requests/${encodeURIComponent(requestId)}`),
  receipt: (projectId: string, requestId: string) =>
    call<ReceiptView>("GET", `/admin/v1/projects/${encodeURIComponent(projectId)}/requests/${encodeURIComponent(requestId)}/receipt`),
  receiptKeys: () => call<{ data: ReadonlyArray<PublicKey> }>("GET", "/v1/receipts/keys").then((r) => r.data)
}
