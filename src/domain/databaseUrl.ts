/**
 * DATABASE_URL → SQLite file, or a PostgreSQL server. Dependency-free on purpose: the audit CLI imports it without loading
 * the Effect SQL stack, and the settings check it at start (src/domain/config.ts).
 */

/** Whether `databaseUrl` names the embedded SQLite store. */
export const isSqliteUrl = (databaseUrl: string): boolean => databaseUrl.startsWith("sqlite:")

/** Whether `databaseUrl` names a PostgreSQL server (the scale-out store: several instances, one ledger). */
export const isPostgresUrl = (databaseUrl: string): boolean => /^postgres(ql)?:\/\//.test(databaseUrl)

/** Whether `databaseUrl` names a store this build can open. */
export const isSupportedDatabaseUrl = (databaseUrl: string): boolean => isSqliteUrl(databaseUrl) || isPostgresUrl(databaseUrl)

export const sqliteFilename = (databaseUrl: string): string => {
  if (!isSqliteUrl(databaseUrl)) {
    throw new Error(`DATABASE_URL must be sqlite:<path> (got ${databaseUrl.split(":")[0]}:…)`)
  }
  const path = databaseUrl.slice("sqlite:".length).replace(/^\/\/(?=\/)/, "")
  return path === "" ? ":memory:" : path
}
