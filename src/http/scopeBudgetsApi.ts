/**
 * The key and end-user budgets in the admin API (issue 41, docs/contract.md §8), an HttpApi group for
 * the OpenAPI document, served by src/http/scopeBudgetsRoutes.ts: PATCH a key's `budget_credits`, read
 * it; a project's `end_user_budget_credits` (its default for every end user); an end user's own
 * budget — set (PUT), read, listed (by name, or ranked by spend), removed (DELETE: the default applies
 * again); a project's keys with a budget, listed with their windows. Operator only.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { AdminForbidden, AdminNotFound, InvalidRequest } from "../domain/errors.ts"
import { MAX_END_USER_LENGTH } from "../domain/chat.ts"
import { PageCursor, PageLimit } from "../domain/paging.ts"
import { listPage } from "../domain/wire/admin.ts"
import { EndUser, EndUserList, EndUserName, EndUserPut, KeyBudget, KeyPatch, ScopeCap } from "../domain/wire/scopes.ts"
import { adminErrorAt, PathId } from "./adminParams.ts"

const E = {
  invalidRequest: adminErrorAt(InvalidRequest, "malformed JSON or fields (param names the field: budget_credits, end_user_budget_credits, user)"),
  forbidden: adminErrorAt(AdminForbidden, "a team session is read-only; invalid_csrf_token: a cookie-authenticated write without the session's X-CSRF-Token"),
  notFound: adminErrorAt(AdminNotFound, "unknown project or key id; DELETE: the end user has no budget of its own")
}

const KeyPath = Schema.Struct({ id: PathId("A key id, key_…") })
const ProjectPath = Schema.Struct({ id: PathId("A project id, prj_…") })
const EndUserPath = Schema.Struct({ id: PathId("A project id, prj_…"), user: EndUserName })

export const EndUserDefault = Schema.Struct({
  object: Schema.Literal("end_user_default"),
  project_id: Schema.String,
  end_user_budget_credits: Schema.NullOr(Schema.Int)
}).annotations({ identifier: "EndUserDefault", description: "A project's budget for each of its end users without one of their own (null: none)." })

export const KeyBudgetList = listPage(KeyBudget, "KeyBudgetList", "A project's keys that have a budget, by id, each with its current window.")

/** `order` of the end-user list: `name` (default) lists the overrides; `spent` every end user with a window now, most spent first. */
export const EndUserOrder = Schema.Literal("name", "spent").annotations({
  description: "name (default): the end users with a budget of their own, by name. spent: every end user that spent or holds in the current window, most spent first, then by name."
})

/** `cursor` of the end-user list: the previous page's next_cursor (by name: the last name; by spent: `<spent>:<name>`). */
const EndUsersCursor = Schema.String.pipe(Schema.maxLength(MAX_END_USER_LENGTH + 17)).annotations({
  description: "The previous page's next_cursor (by name: the last name; by spent: <spent>:<name>)."
})

export const EndUserDefaultPatch = Schema.Struct({ end_user_budget_credits: ScopeCap })

export const scopeBudgetsGroup = HttpApiGroup.make("scopeBudgets")
  .add(
    HttpApiEndpoint.patch("updateKey", "/admin/v1/keys/:id")
      .setPath(KeyPath)
      .setPayload(KeyPatch)
      .addSuccess(KeyBudget)
      .addError(E.invalidRequest)
      .addError(E.forbidden)
      .addError(E.notFound)
      .annotate(OpenApi.Description, "Set a key's budget_credits (null clears it): from the next call on, the key's calls are held against it too (spec/scopes.ts).")
  )
  .add(HttpApiEndpoint.get("getKeyBudget", "/admin/v1/keys/:id/budget").setPath(KeyPath).addSuccess(KeyBudget).addError(E.forbidden).addError(E.notFound))
  .add(HttpApiEndpoint.get("getEndUserDefault", "/admin/v1/projects/:id/end_user_budget").setPath(ProjectPath).addSuccess(EndUserDefault).addError(E.forbidden).addError(E.notFound))
  .add(
    HttpApiEndpoint.patch("updateEndUserDefault", "/admin/v1/projects/:id/end_user_budget")
      .setPath(ProjectPath)
      .setPayload(EndUserDefaultPatch)
      .addSuccess(EndUserDefault)
      .addError(E.invalidRequest)
      .addError(E.forbidden)
      .addError(E.notFound)
  )
  .add(
    HttpApiEndpoint.get("listEndUsers", "/admin/v1/projects/:id/end_users")
      .setPath(ProjectPath)
      .setUrlParams(Schema.Struct({ limit: Schema.optional(PageLimit), cursor: Schema.optional(EndUsersCursor), order: Schema.optional(EndUserOrder) }))
      .addSuccess(EndUserList)
      .addError(E.invalidRequest)
      .addError(E.forbidden)
      .addError(E.notFound)
      .annotate(OpenApi.Description, "A project's end users: by name, those with a budget of their own; order=spent, the top spenders of the current window.")
  )
  .add(
    HttpApiEndpoint.get("listKeyBudgets", "/admin/v1/projects/:id/key_budgets")
      .setPath(ProjectPath)
      .setUrlParams(Schema.Struct({ limit: Schema.optional(PageLimit), cursor: Schema.optional(PageCursor) }))
      .addSuccess(KeyBudgetList)
      .addError(E.invalidRequest)
      .addError(E.forbidden)
      .addError(E.notFound)
      .annotate(OpenApi.Description, "A project's keys that have a budget (budget_credits), by id, each with its current window: spent, reserved, remaining.")
  )
  .add(HttpApiEndpoint.get("getEndUser", "/admin/v1/projects/:id/end_users/:user").setPath(EndUserPath).addSuccess(EndUser).addError(E.invalidRequest).addError(E.forbidden).addError(E.notFound))
  .add(
    HttpApiEndpoint.put("putEndUser", "/admin/v1/projects/:id/end_users/:user")
      .setPath(EndUserPath)
      .setPayload(EndUserPut)
      .addSuccess(EndUser)
      .addError(E.invalidRequest)
      .addError(E.forbidden)
      .addError(E.notFound)
  )
  .add(
    HttpApiEndpoint.del("deleteEndUser", "/admin/v1/projects/:id/end_users/:user")
      .setPath(EndUserPath)
      .addSuccess(EndUser)
      .addError(E.invalidRequest)
      .addError(E.forbidden)
      .addError(E.notFound)
  )
