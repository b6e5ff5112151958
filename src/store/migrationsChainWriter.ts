/**
 * Migration 0026_pg_chain_writer — one writer of a project's receipt chain at a time, taken before
 * anything else the settlement locks (issue 40; docs/decisions/0056).
 *
 * An instance seals a settlement's receipt on the chain head it last saw; `tollgate_settle` appends it
 * only if that is still the head. With one hot project on several instances behind a round-robin
 * balancer the head changes hands every turn, so nearly every batch was sealed twice or three times and
 * sent two to four times (0055). The way out is to know the head before sealing: lock it, read it, seal
 * on it, write. The locked path of 0008 did so, but locked the holds and the project's budget window
 * too, across the round trips and the sealing, so the other instances' reservations of the project
 * waited for it as well.
 *
 * Here the chain's writer is a transaction-level advisory lock a project (class 7302, the project id's
 * `hashtext`), and every settlement takes it first:
 *
 * - `tollgate_lock_chains(items)`: the batch's projects' locks, in lock-key order (two batches of
 *   several projects take theirs in one order: no cycle), then each head read — under its lock, so no
 *   other settlement can move it until this transaction ends. Answers `{project_id: {seq, hash}}`, a
 *   chain not begun as seq 0 and the genesis hash (spec/receipt.ts `GENESIS_HASH`). The transaction's
 *   `idle_in_transaction_session_timeout` is set to `CHAIN_HOLDER_IDLE_MS`: a holder that stops
 *   between its statements (frozen, or cut off with its socket still open, which PostgreSQL would
 *   notice only by TCP keepalive) loses its session and its locks, instead of stalling every other
 *   instance's settlements of those projects.
 * - `tollgate_settle` (0023's function, now `tollgate_settle_chained`) takes them first (the locks
 *   alone, `tollgate_lock_chain_keys`: it checks the heads itself, under their row locks), then does
 *   exactly what it did. A settlement that is not on the locked path waits for the writer and then
 *   checks its heads as before.
 * - `tollgate_settle_lock` (0023's, now `tollgate_settle_lock_rows`) takes them first too, then the
 *   holds, windows and heads it locked: this version no longer calls it (its locked path is
 *   `tollgate_lock_chains`), an instance of the version before does until it is upgraded, and must
 *   take the locks in the same order as every settlement.
 *
 * The locks' order stays one order for every writer: chains first (settlements only), then holds,
 * windows, heads. Reservations, abandonments, the sweep and extensions never take a chain lock, and no
 * transaction asks for one while it holds a row lock, so the new lock makes no cycle.
 */
import { GENESIS_HASH } from "../../spec/receipt.ts"
import { statementsByDialect } from "./migrationStatements.ts"

/** The advisory lock class of a project's receipt chain (with the project id's `hashtext`). */
const CHAIN_WRITER_LOCK = 7302

/**
 * How long a transaction holding chain locks may sit idle between its statements (the locked path
 * seals its batch there, milliseconds) before PostgreSQL ends its session and the locks with it.
 */
export const CHAIN_HOLDER_IDLE_MS = 5000

/** `name(p_batch JSONB)` renamed `renamed`, and `name` again as the chains' locks first, then `renamed`. */
const chainLockedFirst = (name: string, renamed: string) => [
  `ALTER FUNCTION ${name}(JSONB) RENAME TO ${renamed}`,
  `CREATE FUNCTION ${name}(p_batch JSONB) RETURNS JSONB LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM tollgate_lock_chain_keys(p_batch->'items');
  RETURN ${renamed}(p_batch);
END
$fn$`
]

const pg = [
  // The locks alone: what every settlement takes first (the heads it checks itself, under their row locks).
  `CREATE FUNCTION tollgate_lock_chain_keys(p_items JSONB) RETURNS VOID LANGUAGE plpgsql AS $fn$
DECLARE
  v_key INTEGER;
BEGIN
  FOR v_key IN SELECT DISTINCT hashtext(b.item->>'project_id') FROM jsonb_array_elements(p_items) AS b(item) ORDER BY 1 LOOP
    PERFORM pg_advisory_xact_lock(${CHAIN_WRITER_LOCK}, v_key);
  END LOOP;
END
$fn$`,
  // The locked path's first statement: the locks, bounded against a holder gone quiet, and the heads read under them.
  `CREATE FUNCTION tollgate_lock_chains(p_items JSONB) RETURNS JSONB LANGUAGE plpgsql AS $fn$
DECLARE
  v_project TEXT;
  v_head RECORD;
  v_chain JSONB := '{}'::JSONB;
BEGIN
  -- A holder that stops talking (frozen, or cut off from the database without the socket closing)
  -- loses its session, and with it the locks, after this long idle in its transaction.
  PERFORM set_config('idle_in_transaction_session_timeout', '${CHAIN_HOLDER_IDLE_MS}', true);
  PERFORM tollgate_lock_chain_keys(p_items);
  FOR v_project IN SELECT DISTINCT b.item->>'project_id' FROM jsonb_array_elements(p_items) AS b(item) LOOP
    SELECT h.seq, h.hash INTO v_head FROM chain_heads h WHERE h.project_id = v_project;
    v_chain := v_chain || jsonb_build_object(v_project, jsonb_build_object('seq', COALESCE(v_head.seq, 0), 'hash', COALESCE(v_head.hash, '${GENESIS_HASH}')));
  END LOOP;
  RETURN v_chain;
END
$fn$`,
  ...chainLockedFirst("tollgate_settle", "tollgate_settle_chained"),
  ...chainLockedFirst("tollgate_settle_lock", "tollgate_settle_lock_rows")
]

export const migrationChainWriter = statementsByDialect({ pg })
