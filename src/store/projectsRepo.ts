/**
 * The Projects service's rows (`projects` table, src/services/Projects.ts): one project by id, the
 * one INSERT of a new one, the one UPDATE of a patch, the count, and the admin list's page
 * (src/store/adminLists.ts).
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { makeAdminLists, type Position } from "./adminLists.ts"
import { insertEvent, type NewEvent } from "./eventsRepo.ts"

/** A project as stored. */
export interface ProjectRow {
  readonly id: string
  readonly organization: string
  readonly name: string
  readonly budget_credits: number
  readonly requests_per_minute: number
  readonly burst: number
  /** The upstream limits (migration 0015); NULL: none. */
  readonly tokens_per_minute: number | null
  readonly max_concurrent: number | null
  /** JSON array of whole percents (migration 0012). */
  readonly alert_thresholds_percent: string
  /** The budget period and its time zone (migration 0019, spec/periods.ts). */
  readonly budget_period: string
  readonly time_zone: string
  readonly created_at: number
  readonly updated_at: number
}

/** What a patch writes. */
export type ProjectFields = Pick<ProjectRow, "name" | "budget_credits" | "requests_per_minute" | "burst" | "tokens_per_minute" | "max_concurrent" | "alert_thresholds_percent" | "budget_period" | "time_zone" | "updated_at">

/** The statements; a service runs them (a store failure is a defect there). */
export const makeProjectsRepo = (sql: SqlClient.SqlClient) => {
  const lists = makeAdminLists(sql)
  return {
    withTransaction: sql.withTransaction,

    find: (id: string) => sql<ProjectRow>`SELECT * FROM projects WHERE id = ${id}`,

    /** Project `id`, its row locked to the end of the transaction on PostgreSQL (SQLite has one writer). */
    findForUpdate: (id: string) =>
      sql.onDialectOrElse({
        pg: () => sql<ProjectRow>`SELECT * FROM projects WHERE id = ${id} FOR UPDATE`,
        orElse: () => sql<ProjectRow>`SELECT * FROM projects WHERE id = ${id}`
      }),

    /** `project.updated` into the outbox, in the update's transaction. */
    event: (e: NewEvent) => insertEvent(sql, e),

    insert: (row: ProjectRow) => sql`INSERT INTO projects ${sql.insert({ ...row })}`,

    update: (id: string, f: ProjectFields) =>
      sql`UPDATE projects SET
            name = ${f.name},
            budget_credits = ${f.budget_credits},
            requests_per_minute = ${f.requests_per_minute},
            burst = ${f.burst},
            tokens_per_minute = ${f.tokens_per_minute},
            max_concurrent = ${f.max_concurrent},
            alert_thresholds_percent = ${f.alert_thresholds_percent},
            budget_period = ${f.budget_period},
            time_zone = ${f.time_zone},
            updated_at = ${f.updated_at}
          WHERE id = ${id}`,

    count: () => sql<{ n: number }>`SELECT COUNT(*) AS n FROM projects`,

    /** Project `id`'s position in the list; `only`: the one project a team sees. */
    position: (id: string, only: string | undefined) => lists.projectPosition(id, only),

    /** Up to `limit` projects after `position`, each with its budget window of `period`. */
    page: (period: string, position: Position | undefined, limit: number, only: string | undefined) => lists.projects<ProjectRow>(period, position, limit, only)
  }
}

export class ProjectsRepo extends Effect.Service<ProjectsRepo>()("tollgate/ProjectsRepo", {
  effect: Effect.map(SqlClient.SqlClient, makeProjectsRepo)
}) {}
