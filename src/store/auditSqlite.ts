/**
 * The audit port (src/store/auditSource.ts) on a SQLite file: opened read-only, one read transaction
 * for the whole walk (a consistent snapshot under WAL while the gateway keeps writing), every query
 * streamed with `.iterate()`, so memory stays flat whatever the number of receipts.
 */
import Database from "better-sqlite3"
import type { ArrayRow, AuditSource, Params } from "./auditSource.ts"

export const openSqliteAudit = (file: string): AuditSource => {
  const db = new Database(file, { readonly: true, fileMustExist: true })
  try {
    db.pragma("query_only = ON")
    db.exec("BEGIN")
  } catch (e) {
    db.close()
    throw e
  }
  return {
    label: file,
    batches: <T>(sql: string, params: Params, batch: number) => chunked(db.prepare(sql).iterate(params) as IterableIterator<T>, batch),
    // `.raw()`: each row an array of its columns, no object built per row.
    arrays: (sql: string, params: Params, batch: number) =>
      chunked(db.prepare(sql).raw(true).iterate(params) as IterableIterator<ArrayRow>, batch),
    close: async () => {
      try {
        if (db.inTransaction) db.exec("COMMIT")
      } finally {
        db.close()
      }
    }
  }
}

/** better-sqlite3 is synchronous: a batch is read at once, then handed over. */
async function* chunked<T>(it: IterableIterator<T>, batch: number): AsyncIterable<ReadonlyArray<T>> {
  let chunk: Array<T> = []
  try {
    for (const row of it) {
      chunk.push(row)
      if (chunk.length >= batch) {
        yield chunk
        chunk = []
      }
    }
  } finally {
    it.return?.()
  }
  if (chunk.length > 0) yield chunk
}
