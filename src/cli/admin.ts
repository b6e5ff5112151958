/**
 * `tollgate projects …` and `tollgate keys …`: thin clients of the admin API (docs/contract.md §8).
 */
import { parseArgs } from "node:util"

const baseUrl = () => (process.env.TOLLGATE_URL ?? "http://localhost:8080").replace(/\/+$/, "")

/** The admin token, or undefined after saying it is missing. */
const adminToken = (): string | undefined => {
  const token = process.env.TOLLGATE_ADMIN_TOKEN
  if (token !== undefined && token !== "") return token
  process.stderr.write("TOLLGATE_ADMIN_TOKEN is not set (the admin token printed at first start, or the one you configured).\n")
  return undefined
}

const send = (token: string, method: string, path: string, body?: unknown) =>
  fetch(`${baseUrl()}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })

/** An answer, pretty-printed: to stdout and exit code 0 when it is a success, else to stderr and 1. */
const print = (ok: boolean, text: string): number => {
  const out = ok ? process.stdout : process.stderr
  try {
    out.write(`${JSON.stringify(JSON.parse(text), null, 2)}\n`)
  } catch {
    out.write(`${text}\n`)
  }
  return ok ? 0 : 1
}

export const call = async (method: string, path: string, body?: unknown): Promise<number> => {
  const token = adminToken()
  if (token === undefined) return 2
  const res = await send(token, method, path, body)
  return print(res.ok, await res.text())
}

/**
 * An admin list (docs/contract.md §8): one page (`--limit`, `--cursor`: a page's next_cursor), or with
 * `--all` every page from there on, following next_cursor, printed as one list.
 */
export const list = async (
  path: string,
  options: { readonly limit?: string | undefined; readonly cursor?: string | undefined; readonly all?: boolean | undefined },
  params: Record<string, string> = {}
): Promise<number> => {
  const limit = int(options.limit, "limit")
  const page = (cursor: string | undefined) => {
    const query = new URLSearchParams({ ...params, ...(limit === undefined ? {} : { limit: String(limit) }), ...(cursor === undefined ? {} : { cursor }) }).toString()
    return query === "" ? path : `${path}?${query}`
  }
  if (options.all !== true) return call("GET", page(options.cursor))
  const token = adminToken()
  if (token === undefined) return 2
  const data: Array<unknown> = []
  let cursor = options.cursor
  do {
    const res = await send(token, "GET", page(cursor))
    const text = await res.text()
    if (!res.ok) return print(false, text)
    const answer = JSON.parse(text) as { data: Array<unknown>; next_cursor: string | null }
    data.push(...answer.data)
    cursor = answer.next_cursor ?? undefined
  } while (cursor !== undefined)
  return print(true, JSON.stringify({ object: "list", data, has_more: false, next_cursor: null }))
}

/** The options of every list command, as `list` reads them (spread into a command's parseArgs options). */
export const pageOptions = { limit: { type: "string" }, cursor: { type: "string" }, all: { type: "boolean" } } as const

const int = (v: string | undefined, name: string): number | undefined => {
  if (v === undefined) return undefined
  if (!/^\d+$/.test(v)) throw new Error(`--${name} must be a non-negative integer`)
  return Number(v)
}

/** A key's or an end user's cap (issue 41): a non-negative integer, or `none` for no budget (null). */
const cap = (v: string | undefined): number | null | undefined => (v === "none" ? null : int(v, "budget"))

/** The upstream limits' flags (issue 41 item 3): `--tpm N`, `--max-concurrent N`; `none` removes one (update). */
const limitFlags = (values: { readonly tpm?: string | undefined; readonly "max-concurrent"?: string | undefined }) => ({
  ...(values.tpm === undefined ? {} : { tokens_per_minute: values.tpm === "none" ? null : int(values.tpm, "tpm") }),
  ...(values["max-concurrent"] === undefined ? {} : { max_concurrent: values["max-concurrent"] === "none" ? null : int(values["max-concurrent"], "max-concurrent") })
})

/** A project's budget period and time zone (issue 41 item 2): `--budget-period month|week|day|total`, `--time-zone Europe/Paris`; the server checks them. */
const periodFlags = (values: { readonly "budget-period"?: string | undefined; readonly "time-zone"?: string | undefined }) => ({
  ...(values["budget-period"] === undefined ? {} : { budget_period: values["budget-period"] }),
  ...(values["time-zone"] === undefined ? {} : { time_zone: values["time-zone"] })
})

export const adminCommand = async (group: "projects" | "keys", argv: ReadonlyArray<string>): Promise<number> => {
  const { positionals, values } = parseArgs({
    args: [...argv],
    allowPositionals: true,
    options: {
      name: { type: "string" },
      organization: { type: "string" },
      budget: { type: "string" },
      rpm: { type: "string" },
      burst: { type: "string" },
      tpm: { type: "string" },
      "max-concurrent": { type: "string" },
      "budget-period": { type: "string" },
      "time-zone": { type: "string" },
      environment: { type: "string" },
      "grace-seconds": { type: "string" },
      delete: { type: "boolean" },
      order: { type: "string" },
      ...pageOptions
    }
  })
  const [action, id, user] = positionals
  const need = (what: string) => {
    if (id === undefined) throw new Error(`${group} ${action} needs ${what}`)
    return encodeURIComponent(id)
  }
  if (group === "projects") {
    switch (action) {
      case "create":
        return call("POST", "/admin/v1/projects", {
          name: values.name ?? "project",
          ...(values.organization === undefined ? {} : { organization: values.organization }),
          budget_credits: int(values.budget, "budget") ?? 0,
          rate_limit: { requests_per_minute: int(values.rpm, "rpm") ?? 60, ...(values.burst === undefined ? {} : { burst: int(values.burst, "burst") }), ...limitFlags(values) },
          ...periodFlags(values)
        })
      case "list":
        return list("/admin/v1/projects", values)
      case "get":
        return call("GET", `/admin/v1/projects/${need("a project id")}`)
      case "update": {
        const rpm = int(values.rpm, "rpm")
        const burst = int(values.burst, "burst")
        const limits = limitFlags(values)
        return call("PATCH", `/admin/v1/projects/${need("a project id")}`, {
          ...(values.name === undefined ? {} : { name: values.name }),
          ...(values.budget === undefined ? {} : { budget_credits: int(values.budget, "budget") }),
          ...periodFlags(values),
          ...(rpm === undefined && burst === undefined && Object.keys(limits).length === 0
            ? {}
            : { rate_limit: { ...(rpm === undefined ? {} : { requests_per_minute: rpm }), ...(burst === undefined ? {} : { burst }), ...limits } })
        })
      }
      // Issue 41: the project's default budget for its end users, and an end user's own.
      case "end-user-budget": {
        const path = `/admin/v1/projects/${need("a project id")}/end_user_budget`
        return values.budget === undefined ? call("GET", path) : call("PATCH", path, { end_user_budget_credits: cap(values.budget) })
      }
      case "end-users":
        return list(`/admin/v1/projects/${need("a project id")}/end_users`, values, values.order === undefined ? {} : { order: values.order })
      case "key-budgets":
        return list(`/admin/v1/projects/${need("a project id")}/key_budgets`, values)
      case "end-user": {
        if (user === undefined) throw new Error("projects end-user needs a project id and an end user")
        const path = `/admin/v1/projects/${need("a project id")}/end_users/${encodeURIComponent(user)}`
        if (values.delete === true) return call("DELETE", path)
        // A PUT sets the whole override: its cap and its own upstream limits (absent: none).
        const limits = limitFlags(values)
        if (values.budget === undefined && Object.keys(limits).length > 0) throw new Error("projects end-user sets the whole override: give --budget (C or none) with --tpm / --max-concurrent")
        return values.budget === undefined
          ? call("GET", path)
          : call("PUT", path, { budget_credits: cap(values.budget), ...(Object.keys(limits).length === 0 ? {} : { rate_limit: limits }) })
      }
    }
  } else {
    switch (action) {
      case "create":
      {
        const limits = limitFlags(values)
        return call("POST", `/admin/v1/projects/${need("a project id")}/keys`, {
          environment: values.environment ?? "development",
          ...(Object.keys(limits).length === 0 ? {} : { rate_limit: limits }),
          ...(values.budget === undefined ? {} : { budget_credits: cap(values.budget) })
        })
      }
      case "list":
        return list(`/admin/v1/projects/${need("a project id")}/keys`, values)
      case "rotate": {
        const grace = int(values["grace-seconds"], "grace-seconds")
        return call("POST", `/admin/v1/keys/${need("a key id")}/rotate`, grace === undefined ? {} : { grace_seconds: grace })
      }
      case "revoke":
        return call("POST", `/admin/v1/keys/${need("a key id")}/revoke`)
      case "budget": {
        const path = `/admin/v1/keys/${need("a key id")}`
        return values.budget === undefined ? call("GET", `${path}/budget`) : call("PATCH", path, { budget_credits: cap(values.budget) })
      }
    }
  }
  process.stderr.write(`unknown action: ${group} ${action ?? ""}\n`)
  return 2
}
