/**
 * Migration 0018_scope_thresholds — issue 42's budget thresholds in issue 41's scopes: a key's and an
 * end user's window (`scope_windows`, migration 0014) emit `budget.threshold_reached` as the project's
 * window does (migration 0012's trigger on `budget_windows`), in the settlement's transaction.
 *
 * The thresholds are the project's `alert_thresholds_percent`; the cap is the scope's as the guard
 * reads it (src/store/scopeSql.ts): a key's `budget_credits`, an end user's override else the project's
 * `end_user_budget_credits`. A scope without a cap crosses nothing. The rule is spec/events.ts's
 * (`crossed`, the same SQL as the project's), and "once" is the event's unique cause — project,
 * window, scope kind, scope id and percent — so batches, instances and restarts write one event.
 *
 * The scope's name carries its ids (`key:<key id>`, `end_user:<project>/<user>`, spec/scopes.ts
 * `accountOf`): the key and the project are found by primary key, never by a scan.
 */
import { statementsByDialect } from "./migrationStatements.ts"
import { crossed, PG_NOW, SQLITE_NOW } from "./migrationsEvents.ts"

/** One engine's spelling of the pieces of a scope's name. */
interface Dialect {
  /** `s` from character `from` (1-based) on. */
  readonly from: (s: string, from: string) => string
  /** The 1-based position of `/` in `s` (0: none). */
  readonly slash: (s: string) => string
  /** `s`'s first `n` characters. */
  readonly left: (s: string, n: string) => string
}

const sqliteDialect: Dialect = {
  from: (s, from) => `substr(${s}, ${from})`,
  slash: (s) => `instr(${s}, '/')`,
  left: (s, n) => `substr(${s}, 1, ${n})`
}

const pgDialect: Dialect = {
  from: (s, from) => `substr(${s}, ${from})`,
  slash: (s) => `strpos(${s}, '/')`,
  left: (s, n) => `left(${s}, ${n})`
}

/**
 * The scope a `scope_windows` row is, as one row (kind, scope id, project, cap): a key by its id, an end
 * user by its project's id and its name; none for a name of neither form. `NEW` is the updated row.
 */
const scopeOf = (d: Dialect) => {
  const rest = d.from("NEW.scope", "10") // after 'end_user:'
  const project = d.left(rest, `${d.slash(rest)} - 1`)
  const user = d.from(rest, `${d.slash(rest)} + 1`)
  return `SELECT 'key' AS kind, k.id AS sid, k.project_id AS project_id, k.budget_credits AS cap
      FROM api_keys k WHERE NEW.scope LIKE 'key:%' AND k.id = ${d.from("NEW.scope", "5")}
    UNION ALL
    SELECT 'end_user', ${user}, pp.id,
      CASE WHEN EXISTS (SELECT 1 FROM end_users eu WHERE eu.project_id = pp.id AND eu.end_user = ${user})
        THEN (SELECT eu.budget_credits FROM end_users eu WHERE eu.project_id = pp.id AND eu.end_user = ${user})
        ELSE pp.end_user_budget_credits END
      FROM projects pp WHERE NEW.scope LIKE 'end_user:%' AND pp.id = ${project}`
}

const data = (t: string, json: "json_object" | "json_build_object") =>
  `${json}('scope', s.kind, 'scope_id', s.sid, 'threshold_percent', ${t}, 'cap', s.cap, 'spent', NEW.spent, 'reserved', NEW.reserved, 'period', NEW.period)`

const cause = (t: string) => `'budget.threshold_reached:' || p.id || ':' || NEW.period || ':' || s.kind || ':' || s.sid || ':' || ${t}`

const sqlite = [
  // Every call's settlement moves its key's window, capped or not: the WHEN skips an uncapped key's at
  // the cost of one primary-key read (the body's join and json_each run only for a capped scope).
  `CREATE TRIGGER events_scope_threshold AFTER UPDATE OF spent ON scope_windows
  WHEN NEW.spent > OLD.spent
    AND (NEW.scope NOT LIKE 'key:%' OR (SELECT budget_credits FROM api_keys WHERE id = substr(NEW.scope, 5)) IS NOT NULL)
BEGIN
  INSERT OR IGNORE INTO events (id, type, project_id, organization, data, cause, created_at)
    SELECT 'evt_' || lower(hex(randomblob(12))), 'budget.threshold_reached', p.id, p.organization,
      ${data("t.value", "json_object")}, ${cause("t.value")}, ${SQLITE_NOW}
    FROM (${scopeOf(sqliteDialect)}) s JOIN projects p ON p.id = s.project_id, json_each(p.alert_thresholds_percent) t
    WHERE s.cap IS NOT NULL AND ${crossed("OLD.spent", "NEW.spent", "t.value", "s.cap")}
    ORDER BY t.value;
END`
]

/** The scope (kind, id, project, cap) the updated `scope_windows` row `NEW` is, as PostgreSQL reads it. */
export const pgScopeOf = scopeOf(pgDialect)

/** A scope window's threshold events as the PostgreSQL trigger writes them (`NEW`/`OLD`: the updated `scope_windows` row). */
export const pgScopeThresholdInsert = `INSERT INTO events (id, type, project_id, organization, data, cause, created_at)
    SELECT 'evt_' || substr(replace(gen_random_uuid()::TEXT, '-', ''), 1, 24), 'budget.threshold_reached', p.id, p.organization,
      ${data("t.v", "json_build_object")}::TEXT, ${cause("t.v")}, ${PG_NOW}
    FROM (${pgScopeOf}) s JOIN projects p ON p.id = s.project_id,
      LATERAL (SELECT value::BIGINT AS v FROM jsonb_array_elements_text(p.alert_thresholds_percent::JSONB)) t
    WHERE s.cap IS NOT NULL AND ${crossed("OLD.spent", "NEW.spent", "t.v", "s.cap")}
    ORDER BY t.v
    ON CONFLICT DO NOTHING;`

const pg = [
  `CREATE FUNCTION tollgate_events_scope_threshold() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  ${pgScopeThresholdInsert}
  RETURN NULL;
END
$fn$`,
  `CREATE TRIGGER events_scope_threshold AFTER UPDATE OF spent ON scope_windows
  FOR EACH ROW WHEN (NEW.spent > OLD.spent) EXECUTE FUNCTION tollgate_events_scope_threshold()`
]

export const migrationScopeThresholds = statementsByDialect({ pg, sqlite })
