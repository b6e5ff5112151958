/**
 * Layers for the service tests: each test builds its own graph over a fresh in-memory SQLite store,
 * so no state leaks between tests and the TestClock of the test drives every service's time.
 */
import { Effect, Layer } from "effect"
import { type GatewaySettings, makeSettings, Settings } from "../../src/domain/config.ts"
import { type NewProject, Projects } from "../../src/services/Projects.ts"
import type { NewRequest } from "../../src/services/Requests.ts"
import { DatabaseLive } from "../../src/store/Database.ts"

export const settingsLayer = (overrides: Partial<GatewaySettings> = {}) => Layer.succeed(Settings, makeSettings(overrides))

/** A fresh, migrated in-memory store, plus the Settings it was built with. */
export const storeLayer = (overrides: Partial<GatewaySettings> = {}) => DatabaseLive.pipe(Layer.provideMerge(settingsLayer(overrides)))

/** A project through the Projects service (the only way projects are made). */
export const newProject = (input: Partial<NewProject> = {}) =>
  Effect.flatMap(Projects, (projects) =>
    projects.create({
      name: input.name ?? "test",
      organization: input.organization ?? "org_test",
      budget_credits: input.budget_credits ?? 1_000,
      rate_limit: input.rate_limit ?? { requests_per_minute: 60, burst: 10 }
    })
  ).pipe(Effect.orDie)

/** A pending request row as the Gateway writes it with a reservation: a chat completion on `demo`. */
export const pendingRequest = (r: {
  readonly id: string
  readonly projectId: string
  readonly idempotencyKey: string | null
  readonly rateCardVersion: string
  readonly createdAt: number
}): Omit<NewRequest, "creditsReserved"> => ({
  ...r,
  environment: "development",
  keyId: "key_test",
  endpoint: "/v1/chat/completions",
  model: "auto",
  route: "demo",
  stream: false
})
