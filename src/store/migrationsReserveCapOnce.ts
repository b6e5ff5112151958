/**
 * Migration 0028_pg_reserve_cap_once — a reservation batch on PostgreSQL reads its project's cap once
 * a window, not once a reservation (issue 40; docs/decisions/0063).
 *
 * `tollgate_reserve_many` (migration 0024) walks its batch in (project, period) order and read the
 * project's `budget_credits` for every reservation of it: one more statement a reservation, under
 * the window's lock once the window is locked. Now the cap is read when the walk reaches a window,
 * beside the window's own lock and figures, and every reservation of that window is judged on it.
 *
 * The batch is one transaction, and the answers it gives are the ones a batch gives when no cap
 * change commits during it: a change that commits meanwhile is ordered after the window's
 * reservations, not between two of them. The guard (spent + reserved + amount ≤ cap), the rows written
 * and every answer are otherwise the same text (src/store/migrationsReserveOnePass.ts
 * `reserveManyFunction`, the two texts differing only in where the cap is read).
 */
import { statementsByDialect } from "./migrationStatements.ts"
import { reserveManyFunction } from "./migrationsReserveOnePass.ts"

export const migrationReserveCapOnce = statementsByDialect({ pg: [reserveManyFunction("window")] })
