/**
 * The KeyRegistry service's rows (`api_keys` table, src/services/KeyRegistry.ts): a key with its
 * project's limits, the INSERT of a new key, the guarded claims of rotation and revocation, and the
 * admin list's page (src/store/adminLists.ts).
 */
import type { BudgetPeriod } from "../../spec/periods.ts"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { Environment } from "../domain/ids.ts"
import { makeAdminLists, type Position } from "./adminLists.ts"
import { insertEvent, type NewEvent } from "./eventsRepo.ts"

/** A key as stored, joined with its project's limits. */
export interface KeyRow {
  readonly id: string
  readonly project_id: string
  readonly environment: Environment
  readonly secret_sha256: string
  readonly created_at: number
  readonly expires_at: number | null
  readonly revoked_at: number | null
  readonly replaces: string | null
  readonly replaced_by: string | null
  readonly organization: string
  /** The project's cap (the key's own is `key_budget_credits`). */
  readonly budget_credits: number
  /** The key's own budget (migration 0014; NULL: none). */
  readonly key_budget_credits: number | null
  readonly requests_per_minute: number
  readonly burst: number
  /** The key's and its project's upstream limits (migration 0015; NULL: none). */
  readonly tokens_per_minute: number | null
  readonly max_concurrent: number | null
  readonly project_tokens_per_minute: number | null
  readonly project_max_concurrent: number | null
  /** The project's budget period and time zone (migration 0019). */
  readonly budget_period: BudgetPeriod
  readonly time_zone: string
  /** The project's end users with limits of their own: JSON `{user: [tokens_per_minute, max_concurrent]}` (NULL or `{}`: none). */
  readonly end_user_limits: string | null
}

/** A key to insert: only SHA-256(secret) is stored. */
export interface NewKey {
  readonly id: string
  readonly projectId: string
  readonly environment: Environment
  readonly secretSha256: string
  readonly createdAt: number
  readonly replaces: string | null
  /** Its own upstream limits (migration 0015; null: none). */
  readonly tokensPerMinute: number | null
  readonly maxConcurrent: number | null
  /** Its own budget (migration 0014; null: none), dated for the audit's grandfathered-cap rule (migration 0020). */
  readonly budgetCredits: number | null
}

/** The statements, and the transaction runner the service keeps its boundary with. */
export const makeKeysRepo = (sql: SqlClient.SqlClient) => {
  const lists = makeAdminLists(sql)
  // The project's end users with upstream limits of their own (migration 0022), as one JSON object
  // `{user: [tokens_per_minute, max_concurrent]}` read with the key, so a call's end user's limits come
  // from the key's cache entry, dropped with it when they change.
  const endUserLimits = sql.literal(
    sql.onDialectOrElse({
      pg: () => "(SELECT json_object_agg(e.end_user, json_build_array(e.tokens_per_minute, e.max_concurrent))::TEXT",
      orElse: () => "(SELECT json_group_object(e.end_user, json_array(e.tokens_per_minute, e.max_concurrent))"
    }) + " FROM end_users e WHERE e.project_id = k.project_id AND (e.tokens_per_minute IS NOT NULL OR e.max_concurrent IS NOT NULL))"
  )
  return {
    withTransaction: sql.withTransaction,

    /** Key `keyId` with its project's organization, cap and rate limit. */
    find: (keyId: string) =>
      sql<KeyRow>`SELECT k.id, k.project_id, k.environment, k.secret_sha256, k.created_at, k.expires_at, k.revoked_at, k.replaces, k.replaced_by,
                    k.tokens_per_minute, k.max_concurrent, k.budget_credits AS key_budget_credits,
                    p.organization, p.budget_credits, p.requests_per_minute, p.burst,
                    p.tokens_per_minute AS project_tokens_per_minute, p.max_concurrent AS project_max_concurrent,
                    p.budget_period, p.time_zone, ${endUserLimits} AS end_user_limits
                  FROM api_keys k JOIN projects p ON p.id = k.project_id WHERE k.id = ${keyId}`,

    insert: (key: NewKey) =>
      sql`INSERT INTO api_keys (id, project_id, environment, secret_sha256, created_at, replaces, tokens_per_minute, max_concurrent, budget_credits, budget_changed_at)
          VALUES (${key.id}, ${key.projectId}, ${key.environment}, ${key.secretSha256}, ${key.createdAt}, ${key.replaces}, ${key.tokensPerMinute}, ${key.maxConcurrent},
                  ${key.budgetCredits}, ${key.budgetCredits === null ? null : key.createdAt})`,

    /** Key `keyId`'s own upstream limits (null: none): a row back when the key exists. */
    setLimits: (keyId: string, tokensPerMinute: number | null, maxConcurrent: number | null) =>
      sql<{ id: string }>`UPDATE api_keys SET tokens_per_minute = ${tokensPerMinute}, max_concurrent = ${maxConcurrent} WHERE id = ${keyId} RETURNING id`,

    /** Rotation's claim on key `keyId`, only while it is active: a row back when it won. */
    claimRotation: (keyId: string, expiresAt: number, replacedBy: string) =>
      sql`UPDATE api_keys SET expires_at = ${expiresAt}, replaced_by = ${replacedBy}
          WHERE id = ${keyId} AND revoked_at IS NULL AND expires_at IS NULL RETURNING id`,

    /** Revoke key `keyId` at `now` unless it is revoked already: a row back when this revoked it. */
    revoke: (keyId: string, now: number) => sql<{ id: string }>`UPDATE api_keys SET revoked_at = ${now} WHERE id = ${keyId} AND revoked_at IS NULL RETURNING id`,

    /** A key event (`key.created`, `key.rotated`, `key.revoked`) into the outbox, in the caller's transaction. */
    event: (e: NewEvent) => insertEvent(sql, e),

    /** Key `id`'s position among project `projectId`'s keys (of `environment`, when given). */
    position: (projectId: string, environment: Environment | undefined, id: string) => lists.keyPosition(projectId, environment, id),

    /** Up to `limit` of a project's keys after `position` (of `environment`, when given). */
    page: (projectId: string, environment: Environment | undefined, position: Position | undefined, limit: number) =>
      lists.keys<KeyRow>(projectId, environment, position, limit)
  }
}

export class KeysRepo extends Effect.Service<KeysRepo>()("tollgate/KeysRepo", {
  effect: Effect.map(SqlClient.SqlClient, makeKeysRepo)
}) {}
