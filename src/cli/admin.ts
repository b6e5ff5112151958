/**
 * `tollgate projects …` and `tollgate keys …`: thin clients of the admin API (docs/contract.md §8).
 */
import { parseArgs } from "node:util"

const baseUrl = () => (process.env.TOLLGATE_URL ?? "http://localhost:8080").replace(/\/+$/, "")

const call = async (method: string, path: string, body?: unknown): Promise<number> => {
  const token = process.env.TOLLGATE_ADMIN_TOKEN
  if (token === undefined || token === "") {
    process.stderr.write("TOLLGATE_ADMIN_TOKEN is not set (the admin token printed at first start, or the one you configured).\n")
    return 2
  }
  const res = await fetch(`${baseUrl()}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })
  const text = await res.text()
  const out = res.ok ? process.stdout : process.stderr
  try {
    out.write(`${JSON.stringify(JSON.parse(text), null, 2)}\n`)
  } catch {
    out.write(`${text}\n`)
  }
  return res.ok ? 0 : 1
}

const int = (v: string | undefined, name: string): number | undefined => {
  if (v === undefined) return undefined
  if (!/^\d+$/.test(v)) throw new Error(`--${name} must be a non-negative integer`)
  return Number(v)
}

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
      environment: { type: "string" },
      "grace-seconds": { type: "string" }
    }
  })
  const [action, id] = positionals
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
          rate_limit: { requests_per_minute: int(values.rpm, "rpm") ?? 60, ...(values.burst === undefined ? {} : { burst: int(values.burst, "burst") }) }
        })
      case "get":
        return call("GET", `/admin/v1/projects/${need("a project id")}`)
      case "update": {
        const rpm = int(values.rpm, "rpm")
        const burst = int(values.burst, "burst")
        return call("PATCH", `/admin/v1/projects/${need("a project id")}`, {
          ...(values.name === undefined ? {} : { name: values.name }),
          ...(values.budget === undefined ? {} : { budget_credits: int(values.budget, "budget") }),
          ...(rpm === undefined && burst === undefined ? {} : { rate_limit: { ...(rpm === undefined ? {} : { requests_per_minute: rpm }), ...(burst === undefined ? {} : { burst }) } })
        })
      }
    }
  } else {
    switch (action) {
      case "create":
        return call("POST", `/admin/v1/projects/${need("a project id")}/keys`, { environment: values.environment ?? "development" })
      case "list":
        return call("GET", `/admin/v1/projects/${need("a project id")}/keys`)
      case "rotate": {
        const grace = int(values["grace-seconds"], "grace-seconds")
        return call("POST", `/admin/v1/keys/${need("a key id")}/rotate`, grace === undefined ? {} : { grace_seconds: grace })
      }
      case "revoke":
        return call("POST", `/admin/v1/keys/${need("a key id")}/revoke`)
    }
  }
  process.stderr.write(`unknown action: ${group} ${action ?? ""}\n`)
  return 2
}
