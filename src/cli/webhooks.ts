/**
 * `tollgate webhooks …` and `tollgate events list`: thin clients of the admin API's webhooks and
 * events endpoints (docs/contract.md, "Webhooks"), like `tollgate projects` (src/cli/admin.ts).
 *
 *   tollgate webhooks create --url U [--events a,b|*] [--project P] [--organization O] [--description D]
 *   tollgate webhooks list [--limit N] [--cursor C] [--all]
 *   tollgate webhooks get <whe_id>
 *   tollgate webhooks update <whe_id> [--url U] [--events a,b] [--description D] [--enabled true|false]
 *   tollgate webhooks delete <whe_id>
 *   tollgate webhooks rotate-secret <whe_id>
 *   tollgate webhooks deliveries <whe_id> [--limit N] [--cursor C] [--all]
 *   tollgate webhooks retry <whe_id> <del_id>
 *   tollgate events list [--type T] [--since ISO] [--limit N] [--cursor C] [--all]
 */
import { parseArgs } from "node:util"
import { call, list, pageOptions } from "./admin.ts"

const events = (v: string | undefined) => (v === undefined ? undefined : v.split(",").map((s) => s.trim()).filter((s) => s !== ""))

const enabled = (v: string | undefined) => {
  if (v === undefined) return undefined
  if (v !== "true" && v !== "false") throw new Error("--enabled must be true or false")
  return v === "true"
}

/** `{name: value}` for each given value (an absent option is left out of the body). */
const present = (fields: Record<string, unknown>) => Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined))

export const webhooksCommand = async (group: "webhooks" | "events", argv: ReadonlyArray<string>): Promise<number> => {
  const { positionals, values } = parseArgs({
    args: [...argv],
    allowPositionals: true,
    options: {
      url: { type: "string" },
      events: { type: "string" },
      project: { type: "string" },
      organization: { type: "string" },
      description: { type: "string" },
      enabled: { type: "string" },
      type: { type: "string" },
      since: { type: "string" },
      ...pageOptions
    }
  })
  const [action, id, second] = positionals
  const need = (value: string | undefined, what: string) => {
    if (value === undefined) throw new Error(`${group} ${action} needs ${what}`)
    return encodeURIComponent(value)
  }
  if (group === "events") {
    if (action !== "list") {
      process.stderr.write(`unknown action: events ${action ?? ""}\n`)
      return 2
    }
    const query = new URLSearchParams(present({ type: values.type, since: values.since }) as Record<string, string>).toString()
    return list(query === "" ? "/admin/v1/events" : `/admin/v1/events?${query}`, values)
  }
  const endpoint = () => `/admin/v1/webhooks/${need(id, "an endpoint id (whe_…)")}`
  switch (action) {
    case "create":
      return call("POST", "/admin/v1/webhooks", {
        url: values.url ?? "",
        events: events(values.events) ?? ["*"],
        ...present({ project_id: values.project, organization: values.organization, description: values.description, enabled: enabled(values.enabled) })
      })
    case "list":
      return list("/admin/v1/webhooks", values)
    case "get":
      return call("GET", endpoint())
    case "update":
      return call("PATCH", endpoint(), present({ url: values.url, events: events(values.events), description: values.description, enabled: enabled(values.enabled) }))
    case "delete":
      return call("DELETE", endpoint())
    case "rotate-secret":
      return call("POST", `${endpoint()}/rotate_secret`)
    case "deliveries":
      return list(`${endpoint()}/deliveries`, values)
    case "retry":
      return call("POST", `${endpoint()}/deliveries/${need(second, "a delivery id (del_…)")}/retry`)
  }
  process.stderr.write(`unknown action: webhooks ${action ?? ""}\n`)
  return 2
}
