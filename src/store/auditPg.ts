/**
 * The audit port (src/store/auditSource.ts) on PostgreSQL: one connection, one REPEATABLE READ, READ
 * ONLY transaction for the whole walk (every query sees the same snapshot while the instances keep
 * settling), and every query read through a server-side cursor (`DECLARE … CURSOR`, `FETCH n`), so
 * the audit holds one batch at a time whatever the size of the store.
 *
 * node-postgres directly, not the Effect SQL stack: the audit CLI stays a plain reader. BIGINT (and
 * an integral NUMERIC) arrive as numbers; a value outside the safe integer range fails loudly
 * rather than being rounded (as the gateway's own connection does, src/store/Postgres.ts).
 */
import pg from "pg"
import type { ArrayRow, AuditSource, Params } from "./auditSource.ts"

const INT8_OID = 20
const NUMERIC_OID = 1700

const safeInteger = (text: string): number => {
  const n = Number(text)
  if (!Number.isSafeInteger(n)) throw new RangeError(`PostgreSQL returned ${text}, outside the safe integer range`)
  return n
}

const types = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    format !== "binary" && (oid === INT8_OID || oid === NUMERIC_OID) ? safeInteger : pg.types.getTypeParser(oid, format as "text")) as typeof pg.types.getTypeParser
}

/** The URL without its password, for the report. */
export const redactedUrl = (url: string): string => {
  try {
    const u = new URL(url)
    if (u.password !== "") u.password = "***"
    return u.toString()
  } catch {
    return "postgres://…"
  }
}

/** `@name` parameters as PostgreSQL's `$n`, in order of first use. */
export const positional = (sql: string, params: Params): { readonly text: string; readonly values: Array<unknown> } => {
  const names: Array<string> = []
  const text = sql.replace(/@([a-z_]+)\b/g, (_, name: string) => {
    if (!(name in params)) throw new Error(`audit query names @${name}, which has no value`)
    let i = names.indexOf(name)
    if (i < 0) i = names.push(name) - 1
    return `$${i + 1}`
  })
  return { text, values: names.map((n) => params[n]) }
}

export const openPgAudit = async (url: string): Promise<AuditSource> => {
  const client = new pg.Client({ connectionString: url, types, application_name: "tollgate audit" })
  await client.connect()
  try {
    await client.query("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
  } catch (e) {
    await client.end()
    throw e
  }
  let cursors = 0
  /** The rows of one query through a server-side cursor, `batch` at a time, as objects or as arrays. */
  async function* fetched<T>(sql: string, params: Params, batch: number, rowMode: "object" | "array"): AsyncIterable<ReadonlyArray<T>> {
    const { text, values } = positional(sql, params)
    const name = `audit_${++cursors}`
    // A cursor's parameters are bound in DECLARE; it lives until CLOSE or the transaction's end.
    await client.query(`DECLARE ${name} NO SCROLL CURSOR FOR ${text}`, values)
    try {
      for (;;) {
        const fetch = `FETCH FORWARD ${Math.max(1, Math.floor(batch))} FROM ${name}`
        const res = rowMode === "array" ? await client.query({ text: fetch, rowMode: "array" }) : await client.query(fetch)
        if (res.rows.length > 0) yield res.rows as Array<T>
        if (res.rows.length < batch) break
      }
    } finally {
      // After a failed FETCH the transaction is aborted and CLOSE fails too: the first error is the one to report.
      await client.query(`CLOSE ${name}`).catch(() => undefined)
    }
  }
  return {
    label: redactedUrl(url),
    batches: <T>(sql: string, params: Params, batch: number) => fetched<T>(sql, params, batch, "object"),
    arrays: (sql: string, params: Params, batch: number) => fetched<ArrayRow>(sql, params, batch, "array"),
    close: async () => {
      try {
        await client.query("COMMIT")
      } finally {
        await client.end()
      }
    }
  }
}
