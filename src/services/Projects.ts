/**
 * Projects: the tenant scope's budget cap and rate limit. Owned here; read by KeyRegistry when it
 * authenticates, and by the Ledger's guarded reservation (the cap is read inside the same statement).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"
import { defaultBurst } from "../../spec/rateLimit.ts"
import { AdminNotFound, InvalidRequest } from "../domain/errors.ts"
import { newOrganizationId, newProjectId } from "../domain/ids.ts"
import { cursorPosition, type Page, pageOf, type PageRequest } from "../domain/paging.ts"
import { makeAdminLists } from "../store/adminLists.ts"
import type { BudgetWindow } from "../store/ledgerStatements.ts"

export interface Project {
  readonly id: string
  readonly organization: string
  readonly name: string
  readonly budget_credits: number
  readonly rate_limit: { readonly requests_per_minute: number; readonly burst: number }
  readonly created_at: string
  readonly updated_at: string
}

interface ProjectRow {
  readonly id: string
  readonly organization: string
  readonly name: string
  readonly budget_credits: number
  readonly requests_per_minute: number
  readonly burst: number
  readonly created_at: number
  readonly updated_at: number
}

export const toProject = (r: ProjectRow): Project => ({
  id: r.id,
  organization: r.organization,
  name: r.name,
  budget_credits: r.budget_credits,
  rate_limit: { requests_per_minute: r.requests_per_minute, burst: r.burst },
  created_at: new Date(r.created_at).toISOString(),
  updated_at: new Date(r.updated_at).toISOString()
})

/** A project in a list, with its current budget window. */
export interface ProjectWithWindow {
  readonly project: Project
  readonly window: BudgetWindow
}

export interface NewProject {
  readonly name: string
  readonly organization?: string | undefined
  readonly budget_credits: number
  readonly rate_limit: { readonly requests_per_minute: number; readonly burst?: number | undefined }
}

export interface ProjectPatch {
  readonly name?: string | undefined
  readonly budget_credits?: number | undefined
  readonly rate_limit?: { readonly requests_per_minute?: number | undefined; readonly burst?: number | undefined } | undefined
}

const isCount = (n: unknown): n is number => typeof n === "number" && Number.isSafeInteger(n) && n >= 0

export class Projects extends Effect.Service<Projects>()("tollgate/Projects", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const lists = makeAdminLists(sql)

    const find = (id: string) =>
      Effect.map(sql<ProjectRow>`SELECT * FROM projects WHERE id = ${id}`, (rows) => Option.fromNullable(rows[0]))

    const get = (id: string): Effect.Effect<Project, AdminNotFound> =>
      find(id).pipe(
        Effect.orDie,
        Effect.flatMap(Option.match({
          onNone: () => Effect.fail(new AdminNotFound({ message: `No project with id ${id}.` })),
          onSome: (r) => Effect.succeed(toProject(r))
        }))
      )

    const create = (input: NewProject): Effect.Effect<Project, InvalidRequest> =>
      Effect.gen(function* () {
        if (typeof input.name !== "string" || input.name.length === 0) {
          return yield* new InvalidRequest({ message: "name must be a non-empty string.", param: "name" })
        }
        if (!isCount(input.budget_credits)) {
          return yield* new InvalidRequest({ message: "budget_credits must be a non-negative integer.", param: "budget_credits" })
        }
        const rpm = input.rate_limit?.requests_per_minute
        if (!isCount(rpm) || rpm === 0) {
          return yield* new InvalidRequest({ message: "rate_limit.requests_per_minute must be a positive integer.", param: "rate_limit.requests_per_minute" })
        }
        const burst = input.rate_limit.burst ?? defaultBurst(rpm)
        if (!isCount(burst) || burst === 0) {
          return yield* new InvalidRequest({ message: "rate_limit.burst must be a positive integer.", param: "rate_limit.burst" })
        }
        const now = yield* Clock.currentTimeMillis
        const row: ProjectRow = {
          id: newProjectId(),
          organization: input.organization ?? newOrganizationId(),
          name: input.name,
          budget_credits: input.budget_credits,
          requests_per_minute: rpm,
          burst,
          created_at: now,
          updated_at: now
        }
        yield* sql`INSERT INTO projects ${sql.insert({ ...row })}`.pipe(Effect.orDie)
        return toProject(row)
      })

    const update = (id: string, patch: ProjectPatch): Effect.Effect<Project, AdminNotFound | InvalidRequest> =>
      Effect.gen(function* () {
        const current = yield* get(id)
        if (patch.budget_credits !== undefined && !isCount(patch.budget_credits)) {
          return yield* new InvalidRequest({ message: "budget_credits must be a non-negative integer.", param: "budget_credits" })
        }
        const rpm = patch.rate_limit?.requests_per_minute ?? current.rate_limit.requests_per_minute
        const burst = patch.rate_limit?.burst ?? current.rate_limit.burst
        if (!isCount(rpm) || rpm === 0 || !isCount(burst) || burst === 0) {
          return yield* new InvalidRequest({ message: "rate_limit values must be positive integers.", param: "rate_limit" })
        }
        const now = yield* Clock.currentTimeMillis
        yield* sql`UPDATE projects SET
            name = ${patch.name ?? current.name},
            budget_credits = ${patch.budget_credits ?? current.budget_credits},
            requests_per_minute = ${rpm},
            burst = ${burst},
            updated_at = ${now}
          WHERE id = ${id}`.pipe(Effect.orDie)
        return yield* get(id)
      })

    const count = Effect.map(sql<{ n: number }>`SELECT COUNT(*) AS n FROM projects`, (rows) => rows[0]?.n ?? 0).pipe(Effect.orDie)

    /**
     * A page of projects, oldest first, each with its budget window of `period` (src/domain/paging.ts);
     * `only`: the one project a team sees. The cursor is a project's id; another one is a 400.
     */
    const page = (period: string, request: PageRequest, only?: string): Effect.Effect<Page<ProjectWithWindow>, InvalidRequest> =>
      Effect.gen(function* () {
        const position = yield* cursorPosition(request, (cursor) => Effect.orDie(lists.projectPosition(cursor, only)))
        const rows = yield* Effect.orDie(lists.projects<ProjectRow>(period, position, request.limit + 1, only))
        return pageOf(rows, request.limit, (r) => ({
          project: toProject(r),
          window: { period, cap: r.budget_credits, spent: r.window_spent, reserved: r.window_reserved }
        }))
      })

    return { get, create, update, count, page } as const
  })
}) {}
