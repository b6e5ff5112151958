/**
 * First start on an empty store: create a default project and a development key, and an admin token
 * unless TOLLGATE_ADMIN_TOKEN is set. The secrets are returned once (main prints them once) and only
 * their SHA-256 is kept. Later starts find the project and return no secrets.
 */
import { Effect, Option, Redacted } from "effect"
import { hashSecret, newAdminToken, sameHash } from "../domain/apiKey.ts"
import { Settings } from "../domain/config.ts"
import { AdminUnauthorized } from "../domain/errors.ts"
import { SettingsRepo } from "../store/settingsRepo.ts"
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
    const repo = yield* SettingsRepo
    const settings = yield* Settings
    const projects = yield* Projects
    const keys = yield* KeyRegistry

    // Several instances may start together on an empty store: each write below is one guarded
    // INSERT on a primary key, so exactly one of them generates the admin token and exactly one
    // creates the default project (and prints its key); the others wait for its commit and find it.
    let adminToken: string | undefined
    let stored = yield* repo.adminTokenHash().pipe(Effect.orDie)
    if (Option.isNone(settings.adminToken) && stored.length === 0) {
      const candidate = newAdminToken()
      const won = yield* repo.claimAdminToken(hashSecret(candidate)).pipe(Effect.orDie)
      if (won.length === 1) adminToken = candidate
      else stored = yield* repo.adminTokenHash().pipe(Effect.orDie)
    }
    const adminHash = Option.isSome(settings.adminToken) ? hashSecret(Redacted.value(settings.adminToken.value)) : (stored[0]?.value ?? hashSecret(adminToken!))

    const firstStart: FirstStart | undefined = yield* repo.withTransaction(
      Effect.gen(function* () {
        // The claim: only on a store with no project yet, and only once (the settings row's key).
        const won = yield* repo.claimDefaultProject()
        if (won.length === 0) return undefined
        const d = settings.gateway.default_project
        const project = yield* projects.create({
          name: "default",
          organization: "org_default",
          budget_credits: d?.budget_credits ?? 1_000_000,
          rate_limit: { requests_per_minute: d?.requests_per_minute ?? 600, burst: d?.burst ?? 60 }
        })
        yield* repo.setDefaultProject(project.id)
        const key = yield* keys.create(project.id, "development")
        return { projectId: project.id, developmentKey: key.secret, adminToken }
      })
    ).pipe(Effect.orDie)
    /** Check `Authorization: Bearer <admin token>` in constant time. */
    const authorizeAdmin = (authorization: string | undefined): Effect.Effect<void, AdminUnauthorized> => {
      const token = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? "")?.[1]
      return token !== undefined && sameHash(hashSecret(token), adminHash)
        ? Effect.void
        : Effect.fail(new AdminUnauthorized({ message: "Missing or wrong admin token. Send TOLLGATE_ADMIN_TOKEN as 'Authorization: Bearer <token>'." }))
    }

    return { firstStart, authorizeAdmin } as const
  }),
  dependencies: [SettingsRepo.Default]
}) {}
