/**
 * Projects: the tenant scope's budget cap and rate limit. Owned here; read by KeyRegistry when it
 * authenticates, and by the Ledger's guarded reservation (the cap is read inside the same statement).
 */
import { Clock, Effect, Option, type Schema } from "effect"
import { DEFAULT_THRESHOLDS } from "../../spec/events.ts"
import { defaultBurst } from "../../spec/rateLimit.ts"
import { type BudgetPeriod as BudgetPeriodName, DEFAULT_BUDGET_PERIOD, DEFAULT_TIME_ZONE } from "../../spec/periods.ts"
import { BudgetCredits, BudgetPeriod, Burst, checkField, MaxConcurrent, Organization, ProjectName, RequestsPerMinute, TimeZone, TokensPerMinute } from "../domain/adminFields.ts"
import { AdminNotFound, InvalidRequest } from "../domain/errors.ts"
import { newOrganizationId, newProjectId } from "../domain/ids.ts"
import { cursorPosition, type Page, pageOf, type PageRequest } from "../domain/paging.ts"
import type * as Wire from "../domain/wire/admin.ts"
import type { BudgetWindow } from "../store/ledgerStatements.ts"
import { type ProjectFields, type ProjectRow, ProjectsRepo } from "../store/projectsRepo.ts"

/** A project as stored: the admin API's answers (src/domain/wire/admin.ts) add `object` and its budget window. */
export type Project = typeof Wire.ProjectRecord.Type

export const toProject = (r: ProjectRow): Project => ({
  id: r.id,
  organization: r.organization,
  name: r.name,
  budget_credits: r.budget_credits,
  rate_limit: {
    requests_per_minute: r.requests_per_minute,
    burst: r.burst,
    ...(r.tokens_per_minute === null ? {} : { tokens_per_minute: r.tokens_per_minute }),
    ...(r.max_concurrent === null ? {} : { max_concurrent: r.max_concurrent })
  },
  alert_thresholds_percent: JSON.parse(r.alert_thresholds_percent) as Array<number>,
  budget_period: r.budget_period,
  time_zone: r.time_zone,
  created_at: new Date(r.created_at).toISOString(),
  updated_at: new Date(r.updated_at).toISOString()
})

/** A project in a list, with its current budget window. */
export interface ProjectWithWindow {
  readonly project: Project
  readonly window: BudgetWindow
}

/** What a new project is made of: the admin API's payload (its fields bounded by src/domain/adminFields.ts). */
export type NewProject = typeof Wire.NewProject.Type

/** The fields a patch may set: the admin API's payload. */
export type ProjectPatch = typeof Wire.ProjectPatch.Type

/** A name within its bounds, trimmed; blank is refused with the service's own message (docs/contract.md §3). */
const checkName = (name: string): Effect.Effect<string, InvalidRequest> =>
  Effect.flatMap(checkField(ProjectName, "name", name), (checked) => {
    const trimmed = checked.trim()
    return trimmed.length === 0 ? Effect.fail(new InvalidRequest({ message: "name must be a non-empty string.", param: "name" })) : Effect.succeed(trimmed)
  })

/** A patched field checked, or the stored value when the patch leaves it out. */
const patched = <A>(schema: Schema.Schema<A>, param: string, value: A | undefined, stored: A): Effect.Effect<A, InvalidRequest> =>
  value === undefined ? Effect.succeed(stored) : checkField(schema, param, value)

/** An upstream limit as sent: checked; null removes it; absent keeps `stored`. */
const optionalLimit = (schema: Schema.Schema<number>, param: string, value: number | null | undefined, stored: number | null): Effect.Effect<number | null, InvalidRequest> =>
  value === undefined ? Effect.succeed(stored) : value === null ? Effect.succeed(null) : checkField(schema, param, value)

/** `project.updated`'s `changes`: each field the update changed, as [old, new] (the rate limit's as `rate_limit.*`). */
const projectChanges = (before: ProjectRow, after: Omit<ProjectFields, "updated_at">): Record<string, readonly [unknown, unknown]> => {
  const changes: Record<string, readonly [unknown, unknown]> = {}
  const put = (field: string, old: unknown, value: unknown) => {
    if (JSON.stringify(old) !== JSON.stringify(value)) changes[field] = [old, value]
  }
  put("name", before.name, after.name)
  put("budget_credits", before.budget_credits, after.budget_credits)
  put("rate_limit.requests_per_minute", before.requests_per_minute, after.requests_per_minute)
  put("rate_limit.burst", before.burst, after.burst)
  put("rate_limit.tokens_per_minute", before.tokens_per_minute, after.tokens_per_minute)
  put("rate_limit.max_concurrent", before.max_concurrent, after.max_concurrent)
  put("alert_thresholds_percent", JSON.parse(before.alert_thresholds_percent), JSON.parse(after.alert_thresholds_percent))
  put("budget_period", before.budget_period, after.budget_period)
  put("time_zone", before.time_zone, after.time_zone)
  return changes
}

export class Projects extends Effect.Service<Projects>()("tollgate/Projects", {
  effect: Effect.gen(function* () {
    const repo = yield* ProjectsRepo

    const find = (id: string) =>
      Effect.map(repo.find(id), (rows) => Option.fromNullable(rows[0]))

    const get = (id: string): Effect.Effect<Project, AdminNotFound> =>
      find(id).pipe(
        Effect.orDie,
        Effect.flatMap(Option.match({
          onNone: () => Effect.fail(new AdminNotFound({ message: `No project with id ${id}.` })),
          onSome: (r) => Effect.succeed(toProject(r))
        }))
      )

    /**
     * A new project, every field checked before the one INSERT (the HTTP decode already bounded them,
     * src/domain/adminFields.ts; the first start's default project comes from the config file).
     */
    const create = (input: NewProject): Effect.Effect<Project, InvalidRequest> =>
      Effect.gen(function* () {
        const name = yield* checkName(input.name)
        const organization = input.organization === undefined ? newOrganizationId() : yield* checkField(Organization, "organization", input.organization)
        const budget = yield* checkField(BudgetCredits, "budget_credits", input.budget_credits)
        const rpm = yield* checkField(RequestsPerMinute, "rate_limit.requests_per_minute", input.rate_limit.requests_per_minute)
        const burst = yield* checkField(Burst, "rate_limit.burst", input.rate_limit.burst ?? defaultBurst(rpm))
        const tpm = yield* optionalLimit(TokensPerMinute, "rate_limit.tokens_per_minute", input.rate_limit.tokens_per_minute, null)
        const concurrent = yield* optionalLimit(MaxConcurrent, "rate_limit.max_concurrent", input.rate_limit.max_concurrent, null)
        const now = yield* Clock.currentTimeMillis
        const row: ProjectRow = {
          id: newProjectId(),
          organization,
          name,
          budget_credits: budget,
          requests_per_minute: rpm,
          burst,
          tokens_per_minute: tpm,
          max_concurrent: concurrent,
          alert_thresholds_percent: JSON.stringify(input.alert_thresholds_percent ?? DEFAULT_THRESHOLDS),
          budget_period: yield* checkField(BudgetPeriod, "budget_period", input.budget_period ?? DEFAULT_BUDGET_PERIOD),
          time_zone: yield* checkField(TimeZone, "time_zone", input.time_zone ?? DEFAULT_TIME_ZONE),
          created_at: now,
          updated_at: now
        }
        yield* repo.insert(row).pipe(Effect.orDie)
        return toProject(row)
      })

    /** The fields a patch sets, checked as on create (the others kept as stored), written by one UPDATE. */
    const update = (id: string, patch: ProjectPatch): Effect.Effect<Project, AdminNotFound | InvalidRequest> =>
      Effect.gen(function* () {
        const current = yield* get(id)
        const name = patch.name === undefined ? current.name : yield* checkName(patch.name)
        const budget = yield* patched(BudgetCredits, "budget_credits", patch.budget_credits, current.budget_credits)
        const rpm = yield* patched(RequestsPerMinute, "rate_limit.requests_per_minute", patch.rate_limit?.requests_per_minute, current.rate_limit.requests_per_minute)
        const burst = yield* patched(Burst, "rate_limit.burst", patch.rate_limit?.burst, current.rate_limit.burst)
        const tpm = yield* optionalLimit(TokensPerMinute, "rate_limit.tokens_per_minute", patch.rate_limit?.tokens_per_minute, current.rate_limit.tokens_per_minute ?? null)
        const concurrent = yield* optionalLimit(MaxConcurrent, "rate_limit.max_concurrent", patch.rate_limit?.max_concurrent, current.rate_limit.max_concurrent ?? null)
        const thresholds = JSON.stringify(patch.alert_thresholds_percent ?? current.alert_thresholds_percent)
        const period = yield* patched(BudgetPeriod, "budget_period", patch.budget_period, current.budget_period as BudgetPeriodName)
        const timeZone = yield* patched(TimeZone, "time_zone", patch.time_zone, current.time_zone)
        const now = yield* Clock.currentTimeMillis
        // The row is read again inside the transaction (locked on PostgreSQL), so `changes` holds the
        // values this update replaced, and the event commits with the update or not at all.
        yield* repo.withTransaction(
          Effect.gen(function* () {
            const [before] = yield* repo.findForUpdate(id)
            if (before === undefined) return
            const fields = { name, budget_credits: budget, requests_per_minute: rpm, burst, tokens_per_minute: tpm, max_concurrent: concurrent, alert_thresholds_percent: thresholds, budget_period: period, time_zone: timeZone }
            const changes = projectChanges(before, fields)
            yield* repo.update(id, { ...fields, updated_at: now })
            if (Object.keys(changes).length > 0) {
              yield* repo.event({ type: "project.updated", projectId: id, organization: before.organization, now, data: { project_id: id, changes } })
            }
          })
        ).pipe(Effect.orDie)
        return yield* get(id)
      })

    const count = Effect.map(repo.count(), (rows) => rows[0]?.n ?? 0).pipe(Effect.orDie)

    /**
     * A page of projects, oldest first, each with its budget window of `period` (src/domain/paging.ts);
     * `only`: the one project a team sees. The cursor is a project's id; another one is a 400.
     */
    const page = (period: string, request: PageRequest, only?: string): Effect.Effect<Page<ProjectWithWindow>, InvalidRequest> =>
      Effect.gen(function* () {
        const position = yield* cursorPosition(request, (cursor) => Effect.orDie(repo.position(cursor, only)))
        const rows = yield* Effect.orDie(repo.page(period, position, request.limit + 1, only))
        return pageOf(rows, request.limit, (r) => ({
          project: toProject(r),
          window: { period, cap: r.budget_credits, spent: r.window_spent, reserved: r.window_reserved }
        }))
      })

    return { get, create, update, count, page } as const
  }),
  dependencies: [ProjectsRepo.Default]
}) {}
