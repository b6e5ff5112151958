/**
 * The key and end-user budgets (src/http/scopeBudgetsApi.ts) served by HttpApiBuilder: operator only
 * (a team session answers 403), bodies decoded by their payload schemas (a cap out of bounds is a 400
 * naming its field) and set by the ScopeBudgets service. AdminAuth is provided where the admin groups
 * are assembled (src/http/adminRoutes.ts).
 */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import type { AdminNotFound, InvalidRequest, PayloadTooLarge } from "../domain/errors.ts"
import { DEFAULT_PAGE_SIZE, type Page } from "../domain/paging.ts"
import { EndUserPut, KeyPatch } from "../domain/wire/scopes.ts"
import { KeyRegistry } from "../services/KeyRegistry.ts"
import { ScopeBudgets } from "../services/ScopeBudgets.ts"
import { AdminCaller } from "./adminApi.ts"
import { PublicApi } from "./api.ts"
import { respondErrors } from "./caller.ts"
import { decodedBody } from "./request.ts"
import { EndUserDefaultPatch } from "./scopeBudgetsApi.ts"
import { operatorOnly } from "./session.ts"

const operator = Effect.flatMap(AdminCaller, (caller) => operatorOnly(caller.viewer))

/** `f` with the ScopeBudgets service, for the operator only. */
const asOperator = <A, E extends AdminNotFound | InvalidRequest | PayloadTooLarge, R>(f: (budgets: ScopeBudgets) => Effect.Effect<A, E, R>) =>
  respondErrors(Effect.zipRight(operator, Effect.flatMap(ScopeBudgets, f)))

const list = <A>(page: Page<A>) => ({ object: "list" as const, ...page })

const forgetProject = (projectId: string) => Effect.flatMap(KeyRegistry, (keys) => keys.forgetProject(projectId))

const defaultOf = (projectId: string, cap: number | null) => ({ object: "end_user_default" as const, project_id: projectId, end_user_budget_credits: cap })

export const scopeBudgetsRoutes = HttpApiBuilder.group(PublicApi, "scopeBudgets", (handlers) =>
  handlers
    .handleRaw("updateKey", ({ path }) =>
      asOperator((b) =>
        Effect.flatMap(decodedBody(KeyPatch), (patch) =>
          Effect.gen(function* () {
            // The key's own upstream limits first (issue 41 item 3), then its budget; the answer shows both.
            const limits = patch.rate_limit === undefined ? undefined : yield* (yield* KeyRegistry).setLimits(path.id, patch.rate_limit)
            const budget = patch.budget_credits === undefined ? yield* b.keyBudget(path.id) : yield* b.setKeyBudget(path.id, patch.budget_credits)
            return limits === undefined ? budget : { ...budget, rate_limit: limits }
          })
        )
      )
    )
    .handle("getKeyBudget", ({ path }) => asOperator((b) => b.keyBudget(path.id)))
    .handle("getEndUserDefault", ({ path }) => asOperator((b) => Effect.map(b.projectDefault(path.id), (cap) => defaultOf(path.id, cap))))
    .handleRaw("updateEndUserDefault", ({ path }) =>
      asOperator((b) =>
        Effect.flatMap(decodedBody(EndUserDefaultPatch), (patch) => Effect.map(b.setEndUserDefault(path.id, patch.end_user_budget_credits), (cap) => defaultOf(path.id, cap)))
      )
    )
    .handle("listEndUsers", ({ path, urlParams }) => asOperator((b) => Effect.map(b.endUsers(path.id, urlParams.cursor, urlParams.limit ?? DEFAULT_PAGE_SIZE, urlParams.order), list)))
    .handle("listKeyBudgets", ({ path, urlParams }) => asOperator((b) => Effect.map(b.keyBudgets(path.id, urlParams.cursor, urlParams.limit ?? DEFAULT_PAGE_SIZE), list)))
    .handle("getEndUser", ({ path }) => asOperator((b) => b.endUser(path.id, path.user)))
    // An end user's own limits travel with its project's keys' cached rows (src/store/keysRepo.ts): a
    // write drops them here and, through the key events, on every other instance.
    .handleRaw("putEndUser", ({ path }) =>
      asOperator((b) =>
        Effect.flatMap(decodedBody(EndUserPut), (put) => Effect.tap(b.putEndUser(path.id, path.user, put.budget_credits, put.rate_limit), () => forgetProject(path.id)))
      )
    )
    .handle("deleteEndUser", ({ path }) => asOperator((b) => Effect.tap(b.deleteEndUser(path.id, path.user), () => forgetProject(path.id))))
)
