/**
 * DATABASE_URL → SQLite file. Dependency-free on purpose: the audit CLI imports it without loading
 * the Effect SQL stack, and the settings check it at start (src/domain/config.ts).
 */

/** Whether `databaseUrl` names a store this build can open (only SQLite so far). */
export const isSqliteUrl = (databaseUrl: string): boolean => databaseUrl.startsWith("sqlite:")

export const sqliteFilename = (databaseUrl: string): string => {
  if (!isSqliteUrl(databaseUrl)) {
    throw new Error(`DATABASE_URL must be sqlite:<path> (got ${databaseUrl.split(":")[0]}:…)`)
  }
  const path = databaseUrl.slice("sqlite:".length).replace(/^\/\/(?=\/)/, "")
  return path === "" ? ":memory:" : path
}
