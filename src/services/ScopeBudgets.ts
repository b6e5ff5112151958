/**
 * The key and end-user budgets (issue 41, spec/scopes.ts; docs/contract.md §8): a key's
 * `budget_credits`, a project's default for its end users (`end_user_budget_credits`) and each end
 * user's override — what the admin API sets and shows. The reservation reads the same columns inside
 * its guarded statements (src/store/scopeSql.ts), so a cap set here holds from the next call on.
 *
 * The window shown is the current one — the project's budget period in its time zone (migration 0019,
 * `Ledger.windowOfCall`), as the calls take it —, its spent and reserved read from the scope's
 * `scope_windows` row (none yet: zero).
 */
import { Clock, Effect } from "effect"
import { BudgetCredits, checkField, checkUpstreamLimits, shownUpstreamLimits } from "../domain/adminFields.ts"
import { AdminNotFound, InvalidRequest } from "../domain/errors.ts"
import type { Page } from "../domain/paging.ts"
import type * as Wire from "../domain/wire/scopes.ts"
import { ProjectsRepo } from "../store/projectsRepo.ts"
import { type EndUserRow, type KeyBudgetRow, ScopeBudgetsRepo, type SpentPosition } from "../store/scopeBudgetsRepo.ts"
import { periodSettings, windowOfCall } from "./Ledger.ts"

export type KeyBudget = typeof Wire.KeyBudget.Type
export type EndUser = typeof Wire.EndUser.Type

const checkCap = (cap: number | null, param: string): Effect.Effect<number | null, InvalidRequest> =>
  cap === null ? Effect.succeed(null) : checkField(BudgetCredits, param, cap)

/** The limits an end user's row has, as answered: only those set; undefined when none is. */
const limitsShown = (row: Pick<EndUserRow, "tokens_per_minute" | "max_concurrent">) =>
  row.tokens_per_minute === null && row.max_concurrent === null ? undefined : shownUpstreamLimits({ tokensPerMinute: row.tokens_per_minute, maxConcurrent: row.max_concurrent })

const windowOf = (period: string, cap: number | null, w: { readonly spent: number | null; readonly reserved: number | null } | undefined) => {
  const spent = Number(w?.spent ?? 0)
  const reserved = Number(w?.reserved ?? 0)
  return { period, spent, reserved, remaining: cap === null ? null : Math.max(0, cap - spent - reserved) }
}

/** How a list of end users is ordered: by name (the overrides), or by what they spent in the window (every end user with one). */
export type EndUserOrder = "name" | "spent"

/** A page of end users by spend ends at `<spent>:<name>`: the next starts after it. */
const spentCursor = (row: EndUserRow) => `${Number(row.spent ?? 0)}:${row.end_user}`

const spentPosition = (cursor: string): Effect.Effect<SpentPosition, InvalidRequest> => {
  const m = /^(0|[1-9][0-9]{0,15}):([\s\S]+)$/.exec(cursor)
  return m === null
    ? Effect.fail(new InvalidRequest({ message: "cursor must be the next_cursor of a page of end users by spend (<spent>:<name>).", param: "cursor" }))
    : Effect.succeed({ spent: Number(m[1]), user: m[2]! })
}

/** A page from rows read with LIMIT `limit + 1`, its cursor written by `cursorOf` from the page's last row. */
const pageFrom = <R, A>(rows: ReadonlyArray<R>, limit: number, view: (row: R) => A, cursorOf: (row: R) => string): Page<A> => {
  const page = rows.slice(0, limit)
  const hasMore = rows.length > limit
  return { data: page.map(view), has_more: hasMore, next_cursor: hasMore ? cursorOf(page[page.length - 1]!) : null }
}

const iso = (millis: number | null) => (millis === null ? null : new Date(Number(millis)).toISOString())

export class ScopeBudgets extends Effect.Service<ScopeBudgets>()("tollgate/ScopeBudgets", {
  dependencies: [ScopeBudgetsRepo.Default, ProjectsRepo.Default],
  effect: Effect.gen(function* () {
    const repo = yield* ScopeBudgetsRepo
    const projects = yield* ProjectsRepo
    const now = Clock.currentTimeMillis

    /** The window project `projectId`'s calls fall in now (its period in its zone; an unknown project: the month's). */
    const currentWindow = (projectId: string) =>
      Effect.gen(function* () {
        const [project] = yield* Effect.orDie(projects.find(projectId))
        return windowOfCall(project === undefined ? {} : periodSettings(project), yield* now)
      })

    const keyBudgetOf = (key: Omit<KeyBudgetRow, "budget_credits"> & { readonly budget_credits: number | null }, period: string): KeyBudget => {
      const cap = key.budget_credits === null ? null : Number(key.budget_credits)
      return { object: "key_budget" as const, key_id: key.id, project_id: key.project_id, budget_credits: cap, ...windowOf(period, cap, key) }
    }

    const keyBudget = (keyId: string): Effect.Effect<KeyBudget, AdminNotFound> =>
      Effect.gen(function* () {
        const [key] = yield* Effect.orDie(repo.key(keyId))
        if (key === undefined) return yield* new AdminNotFound({ message: `No API key with id ${keyId}.` })
        const period = yield* currentWindow(key.project_id)
        const [w] = yield* Effect.orDie(repo.keyWindow(keyId, period))
        return keyBudgetOf({ ...key, spent: w?.spent ?? null, reserved: w?.reserved ?? null }, period)
      })

    /** Set a key's budget (null: none), checked first: the key's budget and current window. */
    const setKeyBudget = (keyId: string, cap: number | null): Effect.Effect<KeyBudget, AdminNotFound | InvalidRequest> =>
      Effect.gen(function* () {
        const checked = yield* checkCap(cap, "budget_credits")
        const updated = yield* Effect.orDie(repo.setKey(keyId, checked, yield* now))
        if (updated.length === 0) return yield* new AdminNotFound({ message: `No API key with id ${keyId}.` })
        return yield* keyBudget(keyId)
      })

    const projectDefault = (projectId: string): Effect.Effect<number | null, AdminNotFound> =>
      Effect.flatMap(Effect.orDie(repo.endUserDefault(projectId)), ([p]) =>
        p === undefined
          ? Effect.fail(new AdminNotFound({ message: `No project with id ${projectId}.` }))
          : Effect.succeed(p.end_user_budget_credits === null ? null : Number(p.end_user_budget_credits))
      )

    /** Set a project's default budget for its end users (null: none). */
    const setEndUserDefault = (projectId: string, cap: number | null): Effect.Effect<number | null, AdminNotFound | InvalidRequest> =>
      Effect.gen(function* () {
        const checked = yield* checkCap(cap, "end_user_budget_credits")
        const updated = yield* Effect.orDie(repo.setEndUserDefault(projectId, checked, yield* now))
        if (updated.length === 0) return yield* new AdminNotFound({ message: `No project with id ${projectId}.` })
        return checked
      })

    const endUserOf = (row: EndUserRow, fallback: number | null, period: string): EndUser => {
      const override = row.created_at !== null
      const cap = override ? (row.budget_credits === null ? null : Number(row.budget_credits)) : fallback
      return {
        object: "end_user",
        project_id: row.project_id,
        user: row.end_user,
        budget_credits: cap,
        budget_source: override ? "override" : cap === null ? "none" : "project_default",
        ...windowOf(period, cap, row),
        ...(limitsShown(row) === undefined ? {} : { rate_limit: limitsShown(row)! }),
        created_at: iso(row.created_at),
        updated_at: iso(row.updated_at)
      }
    }

    /** An end user of a project, override or not (any name: one that never called has spent nothing). */
    const endUser = (projectId: string, user: string): Effect.Effect<EndUser, AdminNotFound> =>
      Effect.gen(function* () {
        const fallback = yield* projectDefault(projectId)
        const period = yield* currentWindow(projectId)
        const [row] = yield* Effect.orDie(repo.endUser(projectId, user, period))
        return endUserOf(row!, fallback, period)
      })

    const putEndUser = (
      projectId: string,
      user: string,
      cap: number | null,
      rateLimit?: Parameters<typeof checkUpstreamLimits>[0]
    ): Effect.Effect<EndUser, AdminNotFound | InvalidRequest> =>
      Effect.gen(function* () {
        const checked = yield* checkCap(cap, "budget_credits")
        const limits = yield* checkUpstreamLimits(rateLimit)
        yield* projectDefault(projectId)
        yield* Effect.orDie(repo.putEndUser(projectId, user, checked, limits, yield* now))
        return yield* endUser(projectId, user)
      })

    /** Remove an end user's override: 404 when it had none. */
    const deleteEndUser = (projectId: string, user: string): Effect.Effect<EndUser, AdminNotFound> =>
      Effect.gen(function* () {
        yield* projectDefault(projectId)
        const deleted = yield* Effect.orDie(repo.deleteEndUser(projectId, user))
        if (deleted.length === 0) return yield* new AdminNotFound({ message: `End user ${JSON.stringify(user)} of project ${projectId} has no budget of its own.` })
        return yield* endUser(projectId, user)
      })

    /**
     * A project's end users a page at a time: by name, those with an override (the cursor: the last
     * name of the page before); by spent, every end user with a window now (it called, or holds), most
     * spent first (the cursor: `<spent>:<name>` of the page's last).
     */
    const endUsers = (projectId: string, cursor: string | undefined, limit: number, order: EndUserOrder = "name"): Effect.Effect<Page<EndUser>, AdminNotFound | InvalidRequest> =>
      Effect.gen(function* () {
        const fallback = yield* projectDefault(projectId)
        const period = yield* currentWindow(projectId)
        const after = cursor === "" ? undefined : cursor
        const view = (r: EndUserRow) => endUserOf(r, fallback, period)
        if (order === "name") return pageFrom(yield* Effect.orDie(repo.endUsers(projectId, after, limit + 1, period)), limit, view, (r) => r.end_user)
        const position = after === undefined ? undefined : yield* spentPosition(after)
        return pageFrom(yield* Effect.orDie(repo.endUsersBySpent(projectId, position, limit + 1, period)), limit, view, spentCursor)
      })

    /** A project's keys with a budget, by id, a page at a time, each with its current window. */
    const keyBudgets = (projectId: string, cursor: string | undefined, limit: number): Effect.Effect<Page<KeyBudget>, AdminNotFound> =>
      Effect.gen(function* () {
        yield* projectDefault(projectId)
        const period = yield* currentWindow(projectId)
        const rows = yield* Effect.orDie(repo.keyBudgets(projectId, cursor === "" ? undefined : cursor, limit + 1, period))
        return pageFrom(rows, limit, (r) => keyBudgetOf(r, period), (r) => r.id)
      })

    return { keyBudget, setKeyBudget, setEndUserDefault, projectDefault, endUser, putEndUser, deleteEndUser, endUsers, keyBudgets } as const
  })
}) {}
