/**
 * DATABASE_URL → SQLite file. Dependency-free on purpose: the audit CLI imports it without loading
 * the Effect SQL stack.
 */
export const sqliteFilename = (databaseUrl: string): string => {
  if (!databaseUrl.startsWith("sqlite:")) {
    throw new Error(`DATABASE_URL must be sqlite:<path> (got ${databaseUrl.split(":")[0]}:…)`)
  }
  const path = databaseUrl.slice("sqlite:".length).replace(/^\/\/(?=\/)/, "")
  return path === "" ? ":memory:" : path
}
