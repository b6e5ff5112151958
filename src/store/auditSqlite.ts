/**
 * The audit port (src/store/auditSource.ts) on a SQLite file: opened read-only, one read transaction
 * for the whole walk (a consistent snapshot under WAL while the gateway keeps writing), every query
 * streamed with `.iterate()`, so memory stays flat whatever the number of receipts.
 */
import Database from "better-sqlite3"
import type { AuditSource, Params } from "./auditSource.ts"

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
    // better-sqlite3 is synchronous: a batch is read at once, then handed over.
    batches: async function* <T>(sql: string, params: Params, batch: number) {
      const it = db.prepare(sql).iterate(params) as IterableIterator<T>
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
    },
    close: async () => {
      try {
        if (db.inTransaction) db.exec("COMMIT")
      } finally {
        db.close()
      }
    }
  }
}
