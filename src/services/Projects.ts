/**
 * Projects: the tenant scope's budget cap and rate limit. Owned here; read by KeyRegistry when it
 * authenticates, and by the Ledger's guarded reservation (the cap is read inside the same statement).
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"
import { defaultBurst } from "../../spec/rateLimit.ts"
import { AdminNotFound, InvalidRequest } from "../domain/errors.ts"
import { newOrganizationId, newProjectId } from "../domain/ids.ts"

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

    /** Every project, oldest first (the dashboard's list; a gateway holds tens to thousands of projects). */
    const list = Effect.map(sql<ProjectRow>`SELECT * FROM projects ORDER BY created_at, id`, (rows) => rows.map(toProject)).pipe(Effect.orDie)

    return { get, create, update, count, list } as const
  })
}) {}
