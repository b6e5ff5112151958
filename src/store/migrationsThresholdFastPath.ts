/**
 * Migration 0027_pg_threshold_fast_path — the budget-threshold triggers of PostgreSQL (0012's on
 * `budget_windows`, 0018's on `scope_windows`) return at once when the settlement crossed no whole
 * percent of the cap (issue 40; docs/decisions/0060).
 *
 * Every settlement batch moves its project's window and its keys' windows, so the triggers fire once a
 * window a batch. Their body was one `INSERT … SELECT` that joined the project, unpacked its thresholds
 * from JSON and tested each — planned and started (the `events` table and its indexes opened) at
 * every fire, to insert nothing in nearly all of them. A CPU profile of PostgreSQL under the bench's
 * load put 16–17% of its time under those triggers.
 *
 * A threshold is a whole percent t of the cap c, crossed when spent moves from o to n with
 * o·100 < t·c ≤ n·100 (spec/events.ts `crossedThresholds`, the SQL `crossed`); some t is crossed
 * exactly when a whole percent passed (spec/events.ts `wholePercentPassed`, the SQL
 * `noWholePercentPassed` negated). So each
 * trigger now reads the cap alone (a primary-key read) and goes on to the same `INSERT` as before only
 * when that whole percent moved: what it writes is unchanged, only the fires that write nothing are
 * cheaper. SQLite's triggers are in-process and untouched.
 */
import { statementsByDialect } from "./migrationStatements.ts"
import { noWholePercentPassed, pgBudgetThresholdInsert } from "./migrationsEvents.ts"
import { pgScopeOf, pgScopeThresholdInsert } from "./migrationsScopeThresholds.ts"

/** No whole percent of cap `v_cap` passed between `OLD.spent` and `NEW.spent`: no threshold can have been crossed. */
const nothingCrossed = noWholePercentPassed("OLD.spent", "NEW.spent", "v_cap")

const pg = [
  `CREATE OR REPLACE FUNCTION tollgate_events_budget_threshold() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  v_cap BIGINT;
BEGIN
  SELECT p.budget_credits INTO v_cap FROM projects p WHERE p.id = NEW.project_id;
  IF ${nothingCrossed} THEN
    RETURN NULL;
  END IF;
  ${pgBudgetThresholdInsert}
  RETURN NULL;
END
$fn$`,
  `CREATE OR REPLACE FUNCTION tollgate_events_scope_threshold() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  v_cap BIGINT;
BEGIN
  SELECT s.cap INTO v_cap FROM (${pgScopeOf}) s;
  IF ${nothingCrossed} THEN
    RETURN NULL;
  END IF;
  ${pgScopeThresholdInsert}
  RETURN NULL;
END
$fn$`
]

export const migrationThresholdFastPath = statementsByDialect({ pg })
