/**
 * First start on an empty store: create a default project and a development key, and an admin token
 * unless TOLLGATE_ADMIN_TOKEN is set. The secrets are returned once (main prints them once) and only
 * their SHA-256 is kept. Later starts find the project and return no secrets.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Redacted } from "effect"
import { hashSecret, newAdminToken, sameHash } from "../domain/apiKey.ts"
import { Settings } from "../domain/config.ts"
import { AdminUnauthorized } from "../domain/errors.ts"
import { KeyRegistry } from "./KeyRegistry.ts"
import { Projects } from "./Projects.ts"

export interface FirstStart {
  readonly projectId: string
  readonly developmentKey: string
  /** Present when the token was generated (TOLLGATE_ADMIN_TOKEN unset). */
  readonly adminToken: string | undefined
}

export class Bootstrap extends Effect.Service<Bootstrap>()("tollgate/Bootstrap", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* Settings
    const projects = yield* Projects
    const keys = yield* KeyRegistry

    let adminToken: string | undefined
    const stored = yield* sql<{ value: string }>`SELECT value FROM settings WHERE name = 'admin_token_sha256'`.pipe(Effect.orDie)
    if (Option.isNone(settings.adminToken) && stored.length === 0) {
      adminToken = newAdminToken()
      yield* sql`INSERT INTO settings (name, value) VALUES ('admin_token_sha256', ${hashSecret(adminToken)})`.pipe(Effect.orDie)
    }
    const adminHash = Option.isSome(settings.adminToken) ? hashSecret(Redacted.value(settings.adminToken.value)) : (stored[0]?.value ?? hashSecret(adminToken!))

    let firstStart: FirstStart | undefined
    if ((yield* projects.count) === 0) {
      const d = settings.gateway.default_project
      const project = yield* projects
        .create({
          name: "default",
          organization: "org_default",
          budget_credits: d?.budget_credits ?? 1_000_000,
          rate_limit: { requests_per_minute: d?.requests_per_minute ?? 600, burst: d?.burst ?? 60 }
        })
        .pipe(Effect.orDie)
      const key = yield* keys.create(project.id, "development").pipe(Effect.orDie)
      firstStart = { projectId: project.id, developmentKey: key.secret, adminToken }
    }

    /** Check `Authorization: Bearer <admin token>` in constant time. */
    const authorizeAdmin = (authorization: string | undefined): Effect.Effect<void, AdminUnauthorized> => {
      const token = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? "")?.[1]
      return token !== undefined && sameHash(hashSecret(token), adminHash)
        ? Effect.void
        : Effect.fail(new AdminUnauthorized({ message: "Missing or wrong admin token. Send TOLLGATE_ADMIN_TOKEN as 'Authorization: Bearer <token>'." }))
    }

    return { firstStart, authorizeAdmin } as const
  })
}) {}
