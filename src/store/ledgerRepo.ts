/**
 * The Ledger service's reads (src/services/Ledger.ts): a project's budget window, a receipt, usage.
 * The window is read synchronously on SQLite's own connection when there is one (no statement
 * compiled per call), through SqlClient otherwise (PostgreSQL). The writes are the store port's
 * (src/store/ChatStore.ts over src/store/ledgerStatements.ts).
 */
import { SqlClient } from "@effect/sql"
import { Context, Effect, Option } from "effect"
import { Sqlite } from "./Database.ts"
import type { Scope } from "./idempotencyStatements.ts"
import type { ScopeWindow } from "../domain/budgetSizing.ts"
import { UNLIMITED } from "../../spec/scopes.ts"
import { type BudgetWindow, endUserAccount, type Hold, keyAccount, makeLedgerStatements } from "./ledgerStatements.ts"
import { endUserCapSql, keyCapSql } from "./scopeSql.ts"

/** What usage can be broken down by: the route (the model as the caller named it), the key, the end user. */
export type UsageGroup = "model" | "key" | "end_user"

/** One group's sums over a window's receipts (`route` is the group's value: a route, a key id, an end user). */
export interface UsageRow {
  readonly route: string
  readonly requests: number
  readonly credits: number
  readonly input_tokens: number
  readonly cached_input_tokens: number
  readonly output_tokens: number
  readonly reasoning_tokens: number
}

/** The scopes a call would be held in: its project's window, and its key's and end user's when it names them. */
export type ScopeRead = Pick<Hold, "projectId" | "period" | "keyId" | "endUser">

/** The windows read on SQLite's connection, synchronously. */
const windowsOnSqlite = (db: Context.Tag.Service<typeof Sqlite>["db"]) => {
  // Reads only: the statements need no signer (nothing is settled through this connection here).
  const { windowSync, scopeWindowsSync } = makeLedgerStatements(db, {
    keyId: "",
    seal: () => {
      throw new Error("the Ledger service does not settle: settlements go through ChatStore")
    }
  })
  return {
    window: (projectId: string, period: string): Effect.Effect<BudgetWindow> => Effect.sync(() => windowSync(projectId, period)),
    scopeWindows: (read: ScopeRead): Effect.Effect<ReadonlyArray<ScopeWindow>> => Effect.sync(() => scopeWindowsSync(read))
  }
}

/** A figure of a window as PostgreSQL answers it (BIGINT may come back as a string). */
const figure = (x: number | string | null | undefined, otherwise: number): number => (x === null || x === undefined ? otherwise : Number(x))

/** The statements; `window` is a defect on a store failure, the others are run by the service. */
export const makeLedgerRepo = (sql: SqlClient.SqlClient, sqlite: Option.Option<Context.Tag.Service<typeof Sqlite>>) => ({
  /** Project `projectId`'s budget window `period` (zero when it has not opened yet). */
  window: Option.match(sqlite, {
    onSome: ({ db }) => windowsOnSqlite(db).window,
    onNone: () => (projectId: string, period: string): Effect.Effect<BudgetWindow> =>
      Effect.map(
        sql<{ cap: number; spent: number | null; reserved: number | null }>`
          SELECT p.budget_credits AS cap, w.spent AS spent, w.reserved AS reserved
          FROM projects p LEFT JOIN budget_windows w ON w.project_id = p.id AND w.period = ${period}
          WHERE p.id = ${projectId}`.pipe(Effect.orDie),
        ([row]) => ({ period, cap: row?.cap ?? 0, spent: row?.spent ?? 0, reserved: row?.reserved ?? 0 })
      )
  }),

  /**
   * Every scope's window a call would be held in (spec/scopes.ts SCOPE_ORDER), each cap read as the
   * reservation reads it (src/store/scopeSql.ts; an uncapped scope's is UNLIMITED): what POST
   * /v1/routing/evaluate sizes its preview on. A defect on a store failure, as `window` is.
   */
  scopeWindows: Option.match(sqlite, {
    onSome: ({ db }) => windowsOnSqlite(db).scopeWindows,
    onNone: () => (read: ScopeRead): Effect.Effect<ReadonlyArray<ScopeWindow>> =>
      Effect.map(
        sql<Record<"cap" | "spent" | "reserved" | "key_cap" | "key_spent" | "key_reserved" | "eu_cap" | "eu_spent" | "eu_reserved", number | string | null>>`
          SELECT p.budget_credits AS cap, w.spent AS spent, w.reserved AS reserved,
                 ${sql.literal(keyCapSql("kq.id"))} AS key_cap, kw.spent AS key_spent, kw.reserved AS key_reserved,
                 ${sql.literal(endUserCapSql("p.id", "eq.u"))} AS eu_cap, ew.spent AS eu_spent, ew.reserved AS eu_reserved
          FROM projects p
          LEFT JOIN budget_windows w ON w.project_id = p.id AND w.period = ${read.period}
          LEFT JOIN (SELECT ${read.keyId ?? null} AS id) kq ON TRUE
          LEFT JOIN (SELECT ${read.endUser ?? null} AS u) eq ON TRUE
          LEFT JOIN scope_windows kw ON kw.scope = ${read.keyId === undefined ? null : keyAccount(read.keyId)} AND kw.period = ${read.period}
          LEFT JOIN scope_windows ew ON ew.scope = ${read.endUser === undefined ? null : endUserAccount(read.projectId, read.endUser)} AND ew.period = ${read.period}
          WHERE p.id = ${read.projectId}`.pipe(Effect.orDie),
        ([row]): ReadonlyArray<ScopeWindow> => [
          { scope: "project", cap: figure(row?.cap, 0), spent: figure(row?.spent, 0), reserved: figure(row?.reserved, 0) },
          ...(read.keyId === undefined ? [] : [{ scope: "key" as const, cap: figure(row?.key_cap, UNLIMITED), spent: figure(row?.key_spent, 0), reserved: figure(row?.key_reserved, 0) }]),
          ...(read.endUser === undefined ? [] : [{ scope: "end_user" as const, cap: figure(row?.eu_cap, UNLIMITED), spent: figure(row?.eu_spent, 0), reserved: figure(row?.eu_reserved, 0) }])
        ]
      )
  }),

  /** Request `requestId`'s receipt body, in `scope`. */
  receipt: (requestId: string, scope: Scope) =>
    sql<{ body: string }>`SELECT body FROM receipts WHERE request_id = ${requestId}
                          AND project_id = ${scope.projectId} AND environment = ${scope.environment}`,

  /**
   * One tenant scope's receipts of window `period`, summed per group: per route (`model`), per key
   * (the request's key), per end user (the hold's; receipts of calls that named none are left out).
   */
  usage: (scope: Scope, period: string, by: UsageGroup = "model") => {
    const sums = sql.literal(`COUNT(*) AS requests, SUM(r.credits_charged) AS credits,
         SUM(r.input_tokens) AS input_tokens, SUM(r.cached_input_tokens) AS cached_input_tokens,
         SUM(r.output_tokens) AS output_tokens, SUM(r.reasoning_tokens) AS reasoning_tokens`)
    const where = sql`r.project_id = ${scope.projectId} AND r.environment = ${scope.environment} AND r.period = ${period}`
    switch (by) {
      case "model":
        return sql<UsageRow>`SELECT r.route AS route, ${sums} FROM receipts r WHERE ${where} GROUP BY r.route ORDER BY r.route`
      case "key":
        return sql<UsageRow>`SELECT q.key_id AS route, ${sums} FROM receipts r JOIN requests q ON q.id = r.request_id
                             WHERE ${where} GROUP BY q.key_id ORDER BY q.key_id`
      case "end_user":
        return sql<UsageRow>`SELECT h.end_user AS route, ${sums} FROM receipts r JOIN reservations h ON h.request_id = r.request_id
                             WHERE ${where} AND h.end_user IS NOT NULL GROUP BY h.end_user ORDER BY h.end_user`
    }
  }
})

export class LedgerRepo extends Effect.Service<LedgerRepo>()("tollgate/LedgerRepo", {
  effect: Effect.zipWith(SqlClient.SqlClient, Effect.serviceOption(Sqlite), makeLedgerRepo)
}) {}
