/**
 * The admin lists' reads (src/domain/paging.ts): projects, and one project's keys, oldest first, a page
 * at a time by keyset on (created_at, id) — the indexes `projects_created` and `api_keys_listed`
 * (migration 0006) — so a page reads its own rows and no others, on both engines. A cursor is an
 * item's id; its position is read first, and a cursor that is no item of the list has none.
 */
import type { SqlClient, Statement } from "@effect/sql"

/** Where a list's item sits in its order. */
export interface Position {
  readonly created_at: number
  readonly id: string
}

/** The budget window columns a project's row is read with: zero when the window has not opened yet. */
export interface WindowColumns {
  readonly window_spent: number
  readonly window_reserved: number
}

/** The statements; a service runs them (a store failure is a defect there) and reads a position's one row. */
export const makeAdminLists = (sql: SqlClient.SqlClient) => {
  /** The filters that hold (undefined: none), and the rows after `position` in the order (created_at, id). */
  const where = (filters: ReadonlyArray<Statement.Fragment | undefined>, position?: Position) =>
    sql.and([
      ...filters.filter((f) => f !== undefined),
      ...(position === undefined ? [] : [sql`(created_at, id) > (${position.created_at}, ${position.id})`])
    ])
  const idIs = (id: string | undefined) => (id === undefined ? undefined : sql`id = ${id}`)
  const environmentIs = (environment: string | undefined) => (environment === undefined ? undefined : sql`environment = ${environment}`)

  return {
    /** Project `id`'s position; `only`: the one project a team sees. */
    projectPosition: (id: string, only: string | undefined) => sql<Position>`SELECT created_at, id FROM projects WHERE ${where([idIs(id), idIs(only)])}`,

    /**
     * Up to `limit` projects after `position`, each with its budget window of `period`, in one
     * statement: the page is read first (by the index), then its windows (by their primary key).
     */
    projects: <Row extends object>(period: string, position: Position | undefined, limit: number, only: string | undefined) =>
      sql<Row & WindowColumns>`
        SELECT p.*, COALESCE(w.spent, 0) AS window_spent, COALESCE(w.reserved, 0) AS window_reserved
        FROM (SELECT * FROM projects WHERE ${where([idIs(only)], position)} ORDER BY created_at, id LIMIT ${limit}) p
        LEFT JOIN budget_windows w ON w.project_id = p.id AND w.period = ${period}
        ORDER BY p.created_at, p.id`,

    /** Key `id`'s position among project `projectId`'s keys (of `environment`, when given). */
    keyPosition: (projectId: string, environment: string | undefined, id: string) =>
      sql<Position>`SELECT created_at, id FROM api_keys WHERE ${where([idIs(id), sql`project_id = ${projectId}`, environmentIs(environment)])}`,

    /** Up to `limit` of a project's keys after `position` (of `environment`, when given). */
    keys: <Row extends object>(projectId: string, environment: string | undefined, position: Position | undefined, limit: number) =>
      sql<Row>`SELECT * FROM api_keys WHERE ${where([sql`project_id = ${projectId}`, environmentIs(environment)], position)}
               ORDER BY created_at, id LIMIT ${limit}`
  }
}
