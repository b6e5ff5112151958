/**
 * Migration 0013_pg_bounded_waits — issue 40 item 3: bounded waits for a hot row on PostgreSQL (if any schema or function change is needed).
 */
import { Effect } from "effect"

export const migrationBoundedWaits = Effect.void
