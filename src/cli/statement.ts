/**
 * `tollgate statement <prj_id> <YYYY-MM> [--out file]`: a closed period's signed statement
 * (GET /admin/v1/projects/{id}/statements/{period}, the body GET /v1/statements/{period} serves),
 * written as served to the file or to stdout, for `tollgate verify --statement` next to the period's
 * export (`tollgate export <prj_id> --period YYYY-MM`). Through the admin API (TOLLGATE_URL,
 * TOLLGATE_ADMIN_TOKEN), like src/cli/export.ts.
 *
 * Exit code: 0 written; 1 the gateway refused (an open period: 404, its message printed); 2 usage.
 */
import { writeFileSync } from "node:fs"
import { parseArgs } from "node:util"
import { adminToken, baseUrl } from "./export.ts"

const usage = "usage: tollgate statement <prj_id> <YYYY-MM> [--out file]"

export const statementCommand = async (argv: ReadonlyArray<string>): Promise<number> => {
  const { values, positionals } = parseArgs({ args: [...argv], allowPositionals: true, options: { out: { type: "string" } } })
  const [projectId, period] = positionals
  if (projectId === undefined || period === undefined || positionals.length > 2) {
    process.stderr.write(`${usage}\n`)
    return 2
  }
  const token = adminToken()
  if (token === undefined) return 2
  const res = await fetch(`${baseUrl()}/admin/v1/projects/${encodeURIComponent(projectId)}/statements/${encodeURIComponent(period)}`, {
    headers: { authorization: `Bearer ${token}` }
  })
  const body = await res.text()
  if (!res.ok) {
    process.stderr.write(`${res.status}: ${body}\n`)
    return 1
  }
  if (values.out === undefined) process.stdout.write(body.endsWith("\n") ? body : `${body}\n`)
  else {
    writeFileSync(values.out, body)
    process.stderr.write(`the statement of ${period} written to ${values.out}\n`)
  }
  return 0
}
