/**
 * The Bootstrap service's first-start claims (`settings` table, src/services/Bootstrap.ts): each is
 * one guarded INSERT on a primary key, so among instances starting together exactly one wins.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** The statements, and the transaction runner the service keeps its boundary with. */
export const makeSettingsRepo = (sql: SqlClient.SqlClient) => ({
  withTransaction: sql.withTransaction,

  /** The stored admin token's SHA-256 (no row before the first start generated one). */
  adminTokenHash: () => sql<{ value: string }>`SELECT value FROM settings WHERE name = 'admin_token_sha256'`,

  /** Store `hash` as the admin token's unless one is stored: a row back when this claim won. */
  claimAdminToken: (hash: string) =>
    sql<{ value: string }>`INSERT INTO settings (name, value) VALUES ('admin_token_sha256', ${hash})
      ON CONFLICT (name) DO NOTHING RETURNING value`,

  /** The default project's claim: only on a store with no project yet, and only once (a row back when it won). */
  claimDefaultProject: () =>
    sql`INSERT INTO settings (name, value) SELECT 'default_project', '' WHERE NOT EXISTS (SELECT 1 FROM projects)
      ON CONFLICT (name) DO NOTHING RETURNING value`,

  /** Record the default project created under the claim. */
  setDefaultProject: (projectId: string) => sql`UPDATE settings SET value = ${projectId} WHERE name = 'default_project'`
})

export class SettingsRepo extends Effect.Service<SettingsRepo>()("tollgate/SettingsRepo", {
  effect: Effect.map(SqlClient.SqlClient, makeSettingsRepo)
}) {}
