/**
 * The admin API's writes and project reads (docs/contract.md §8): projects and their keys. Who may
 * call is src/http/session.ts's (admin token or dashboard session); the dashboard's own reads are in
 * src/http/dashboard.ts.
 */
import { HttpRouter } from "@effect/platform"
import { Clock, Effect } from "effect"
import { KeyRegistry } from "../services/KeyRegistry.ts"
import { Ledger } from "../services/Ledger.ts"
import { Projects } from "../services/Projects.ts"
import type { Viewer } from "../services/Sessions.ts"
import { json } from "./caller.ts"
import { keysWithLastUse } from "./dashboard.ts"
import { jsonObjectBody, optionalObjectBody } from "./request.ts"
import { adminRoute as admin, visibleProject } from "./session.ts"

const projectId = Effect.map(HttpRouter.params, (p) => p.id ?? "")

const projectView = (id: string, viewer: Viewer = { role: "operator" }) =>
  Effect.gen(function* () {
    const projects = yield* Projects
    const ledger = yield* Ledger
    const keys = yield* KeyRegistry
    const project = yield* projects.get(id)
    const now = yield* Clock.currentTimeMillis
    const window = yield* ledger.window(id, ledger.periodOf(now))
    return {
      ...project,
      object: "project",
      current_window: { period: window.period, budget_credits: window.cap, spent: window.spent, reserved: window.reserved, remaining: Math.max(0, window.cap - window.spent - window.reserved) },
      keys: yield* keysWithLastUse(id, yield* keys.list(id), viewer)
    }
  })

export const adminRoutes = HttpRouter.empty.pipe(
  HttpRouter.post(
    "/admin/v1/projects",
    admin(() =>
      Effect.gen(function* () {
        const projects = yield* Projects
        const body = yield* jsonObjectBody
        const created = yield* projects.create(body as never)
        return json(yield* projectView(created.id), 201)
      })
    )
  ),
  HttpRouter.get(
    "/admin/v1/projects/:id",
    admin((_req, viewer) => Effect.flatMap(projectId, (id) => Effect.zipRight(visibleProject(viewer, id), Effect.map(projectView(id, viewer), (v) => json(v)))), "reader")
  ),
  HttpRouter.patch(
    "/admin/v1/projects/:id",
    admin(() =>
      Effect.gen(function* () {
        const projects = yield* Projects
        const keys = yield* KeyRegistry
        const id = yield* projectId
        const body = yield* jsonObjectBody
        yield* projects.update(id, body as never)
        yield* keys.forgetProject(id)
        return json(yield* projectView(id))
      })
    )
  ),
  HttpRouter.post(
    "/admin/v1/projects/:id/keys",
    admin(() =>
      Effect.gen(function* () {
        const keys = yield* KeyRegistry
        const id = yield* projectId
        const body = yield* jsonObjectBody
        return json(yield* keys.create(id, body.environment), 201)
      })
    )
  ),
  HttpRouter.get(
    "/admin/v1/projects/:id/keys",
    admin((_req, viewer) => Effect.gen(function* () {
      const keys = yield* KeyRegistry
      const id = yield* projectId
      yield* visibleProject(viewer, id)
      return json({ object: "list", data: yield* keysWithLastUse(id, yield* keys.list(id), viewer) })
    }), "reader")
  ),
  HttpRouter.post(
    "/admin/v1/keys/:id/rotate",
    admin(() =>
      Effect.gen(function* () {
        const keys = yield* KeyRegistry
        const id = yield* projectId
        const body = yield* optionalObjectBody
        const grace = body.grace_seconds === undefined ? 86_400 : body.grace_seconds
        return json(yield* keys.rotate(id, grace as number), 201)
      })
    )
  ),
  HttpRouter.post(
    "/admin/v1/keys/:id/revoke",
    admin(() => Effect.gen(function* () {
      const keys = yield* KeyRegistry
      return json(yield* keys.revoke(yield* projectId))
    }))
  )
)
