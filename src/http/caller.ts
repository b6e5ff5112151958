/**
 * The project-key caller of the public routes: authenticate the bearer key, remember the caller for
 * the access log (key id and project, never the secret), and turn typed failures into OpenAI error
 * bodies with the headers gathered so far.
 */
import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, FiberRef } from "effect"
import { Settings } from "../domain/config.ts"
import type { AdminError, GovernanceError } from "../domain/errors.ts"
import { KeyRegistry, type Principal } from "../services/KeyRegistry.ts"
import { errorResponse, wireError } from "./errors.ts"
import { header, readJson } from "./request.ts"

export const json = (body: unknown, status = 200) => HttpServerResponse.unsafeJson(body, { status })

/** Map typed failures to wire errors, keeping the headers gathered so far (request id, rate limit). */
export const respondErrors = <A, R>(
  effect: Effect.Effect<A, GovernanceError | AdminError, R>,
  headers: Record<string, string> = {}
): Effect.Effect<A | HttpServerResponse.HttpServerResponse, never, R> => Effect.catchAll(effect, (e) => Effect.succeed(errorResponse(wireError(e), headers)))

/** The caller's key id and project, for the access log line (never the secret). */
export const CurrentCaller = FiberRef.unsafeMake<{ readonly keyId: string; readonly projectId: string } | undefined>(undefined)

export const authenticated = <A, E, R>(f: (principal: Principal, req: HttpServerRequest.HttpServerRequest) => Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const req = yield* HttpServerRequest.HttpServerRequest
    const keys = yield* KeyRegistry
    const principal = yield* keys.authenticate(header(req, "authorization"))
    yield* FiberRef.set(CurrentCaller, { keyId: principal.keyId, projectId: principal.projectId })
    return yield* f(principal, req)
  })

/**
 * A project-key POST: authenticate, read the JSON body within the limits, run `f`. `f` adds the
 * headers it gathers (request id, rate limit) to `headers`; an error answer carries them too.
 */
export const authenticatedPost = <R>(
  f: (
    principal: Principal,
    req: HttpServerRequest.HttpServerRequest,
    body: unknown,
    headers: Record<string, string>
  ) => Effect.Effect<HttpServerResponse.HttpServerResponse, GovernanceError, R>
) =>
  Effect.gen(function* () {
    const settings = yield* Settings
    const headers: Record<string, string> = {}
    return yield* respondErrors(
      authenticated((principal, req) => Effect.flatMap(readJson(settings), (body) => f(principal, req, body, headers))),
      headers
    )
  })
