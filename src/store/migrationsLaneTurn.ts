/**
 * Migration 0025_pg_lane_turn — a lane's settlements and reservations in one statement, one commit
 * (issue 40; docs/decisions/0054).
 *
 * An instance's lane sent its settlements (`tollgate_settle`) and its reservations
 * (`tollgate_reserve_bounded`) as two statements in flight at once: two commits, two WAL flushes, and
 * on one hot project two turns of the same budget window row, each waiting for the other's commit.
 * `tollgate_turn` runs both in one transaction, in this order:
 *
 * 1. the settlements, exactly as `tollgate_settle` (no lock bound: they end money already held, and are
 *    never shed). Its answer comes back as it is — when it wrote nothing (a hold not as the batch knew
 *    it, a head another instance moved) the lane goes on with those settlements as before;
 * 2. the reservations, exactly as `tollgate_reserve_many`, with the hot-row bound as `lock_timeout` for
 *    them alone, in a block of their own (a subtransaction): a lock not had within the bound rolls back
 *    the reservations only — each is shed, nothing of it held — and the settlements still commit.
 *
 * Settling first frees what the settled holds reserved before the reservations are judged, as two
 * statements one after the other would. Locks stay in every writer's order within each part (holds,
 * windows, heads; then claims, windows): the reservations' windows are those the settlements may already
 * hold, taken again by the same transaction without a wait.
 *
 * The answer is the reservations' rows (`o_i` ≥ 0, the figures of migration 0024), then one row with
 * `o_i` = -1 carrying the settlements' answer (`o_settle`), or `o_outcome` = 'shed' when the bound
 * stopped the reservations.
 */
import { statementsByDialect } from "./migrationStatements.ts"
import { FIGURES } from "./migrationsScopes.ts"

/** The row that carries the settlements' answer: `FIGURES` NULL, but `o_outcome` 'shed' when the bound stopped the reservations. */
const carrying = FIGURES.split(",")
  .map((column) => column.trim().split(/\s+/))
  .map(([name, type]) => (name === "o_outcome" ? "CASE WHEN v_shed THEN 'shed' END::TEXT" : `NULL::${type}`))
  .join(", ")

const pg = [
  `CREATE FUNCTION tollgate_turn(p_lock_timeout_ms INTEGER, p_settle JSONB, p_reserve JSONB)
  RETURNS TABLE (o_i INTEGER, ${FIGURES}, o_settle JSONB)
  LANGUAGE plpgsql AS $fn$
DECLARE
  v_settle CONSTANT JSONB := tollgate_settle(p_settle);
  v_shed BOOLEAN := FALSE;
BEGIN
  BEGIN
    PERFORM set_config('lock_timeout', p_lock_timeout_ms::TEXT || 'ms', true);
    RETURN QUERY SELECT r.*, NULL::JSONB FROM tollgate_reserve_many(p_reserve) AS r;
  EXCEPTION WHEN lock_not_available THEN
    v_shed := TRUE;
  END;
  RETURN QUERY SELECT -1, ${carrying}, v_settle;
END
$fn$`
]

export const migrationLaneTurn = statementsByDialect({ pg })
