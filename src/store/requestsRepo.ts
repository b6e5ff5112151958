/**
 * The Requests service's read (src/services/Requests.ts): one request record, scoped to its tenant.
 * The writes are the store port's (src/store/ChatStore.ts over src/store/requestStatements.ts).
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { Scope } from "./idempotencyStatements.ts"
import type { RequestRow } from "./requestStatements.ts"

/** The statements; a service runs them (a store failure is a defect there). */
export const makeRequestsRepo = (sql: SqlClient.SqlClient) => ({
  /** Request `id` of `scope`: no row when it is unknown or another tenant's. */
  find: (id: string, scope: Scope) =>
    sql<RequestRow>`SELECT * FROM requests WHERE id = ${id} AND project_id = ${scope.projectId} AND environment = ${scope.environment}`
})

export class RequestsRepo extends Effect.Service<RequestsRepo>()("tollgate/RequestsRepo", {
  effect: Effect.map(SqlClient.SqlClient, makeRequestsRepo)
}) {}
