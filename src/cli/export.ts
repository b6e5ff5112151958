/**
 * `tollgate export <prj_id> [--period YYYY-MM] [--out file] [--limit N]`: a project's receipts as the
 * export's JSON Lines (spec/export.ts), every page of GET /admin/v1/projects/{id}/receipts one after
 * another, following x-next-cursor, written as they stream (flat memory, whatever the size), to the
 * file or to stdout. Through the admin API (TOLLGATE_URL, TOLLGATE_ADMIN_TOKEN), like src/cli/admin.ts.
 */
import { createWriteStream } from "node:fs"
import { Writable } from "node:stream"
import { parseArgs } from "node:util"

export const baseUrl = () => (process.env.TOLLGATE_URL ?? "http://localhost:8080").replace(/\/+$/, "")

/** TOLLGATE_ADMIN_TOKEN, or undefined after saying on stderr that it is not set. */
export const adminToken = (): string | undefined => {
  const token = process.env.TOLLGATE_ADMIN_TOKEN
  if (token !== undefined && token !== "") return token
  process.stderr.write("TOLLGATE_ADMIN_TOKEN is not set (the admin token printed at first start, or the one you configured).\n")
  return undefined
}

const usage = "usage: tollgate export <prj_id> [--period YYYY-MM] [--out file] [--limit N]"

export const exportCommand = async (argv: ReadonlyArray<string>): Promise<number> => {
  const { values, positionals } = parseArgs({
    args: [...argv],
    allowPositionals: true,
    options: { period: { type: "string" }, out: { type: "string" }, limit: { type: "string" } }
  })
  const projectId = positionals[0]
  if (projectId === undefined || positionals.length > 1) {
    process.stderr.write(`${usage}\n`)
    return 2
  }
  const token = adminToken()
  if (token === undefined) return 2
  const out: Writable = values.out === undefined ? process.stdout : createWriteStream(values.out)
  const write = (chunk: Uint8Array) => new Promise<void>((resolve, reject) => out.write(chunk, (err) => (err ? reject(err) : resolve())))
  let cursor: string | undefined = undefined
  let pages = 0
  try {
    do {
      const query = new URLSearchParams({
        ...(values.period === undefined ? {} : { period: values.period }),
        ...(values.limit === undefined ? { limit: "10000" } : { limit: values.limit }),
        ...(cursor === undefined ? {} : { cursor })
      })
      const res: Response = await fetch(`${baseUrl()}/admin/v1/projects/${encodeURIComponent(projectId)}/receipts?${query}`, { headers: { authorization: `Bearer ${token}` } })
      if (!res.ok || res.body === null) {
        process.stderr.write(`${res.status}: ${await res.text()}\n`)
        return 1
      }
      for await (const chunk of res.body) await write(chunk)
      cursor = res.headers.get("x-next-cursor") ?? undefined
      pages++
    } while (cursor !== undefined)
  } finally {
    if (out !== process.stdout) await new Promise<void>((resolve) => out.end(resolve))
  }
  if (values.out !== undefined) process.stderr.write(`${pages} page(s) written to ${values.out}\n`)
  return 0
}
