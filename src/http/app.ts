/**
 * The HTTP surface besides the two governed calls, on @effect/platform's HttpRouter, composed from its
 * parts by job: the public routes (./publicRoutes.ts), the admin API (./adminRoutes.ts,
 * ./dashboard.ts), and observability (./observability.ts). Every failure, including unknown routes and
 * defects, leaves through src/http/errors.ts as an OpenAI error body. The governed endpoints are served
 * only by src/http/fast.ts, from the governed adapter (./governed.ts).
 */
import { HttpApiError, HttpRouter, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { RouteNotFound } from "@effect/platform/HttpServerError"
import { Cause, Effect, Option } from "effect"
import { dashboardRoutes } from "./dashboard.ts"
import { isTollgateError } from "../domain/errors.ts"
import { apiRouter } from "./apiRoutes.ts"
import { storeUnavailableIn } from "../store/storeFaults.ts"
import { decodeFailure, errorResponse, internalError, logDefect, unknownRoute, wireError } from "./errors.ts"
import { metricsRoutes, observed } from "./observability.ts"
import { publicRoutes } from "./publicRoutes.ts"

// What src/http/fast.ts takes from the app (it is owned with the fast path; the name stays here).
export { logAccess } from "./observability.ts"

export const router = publicRoutes.pipe(
  HttpRouter.concat(metricsRoutes),
  HttpRouter.concat(dashboardRoutes)
)

/**
 * Exit to response: an unknown route is a 404; a domain error its wire answer (headers included) and
 * a request the HttpApi's schemas refused an OpenAI-shaped 400 (the HttpApiBuilder routes fail with
 * them; the HttpRouter handlers answer their own); a defect a logged generic 500; an interruption stays one.
 */
const withCatchAll = <E, R>(routes: HttpRouter.HttpRouter<E, R>) =>
  routes.pipe(
    Effect.catchAllCause((cause) =>
      Effect.gen(function* () {
        const req = yield* HttpServerRequest.HttpServerRequest
        const failure = Cause.failureOption(cause)
        if (Option.isSome(failure)) {
          const e = failure.value
          if (e instanceof RouteNotFound) return unknownRoute(req.method, req.url)
          if (e instanceof HttpApiError.HttpApiDecodeError) return errorResponse(wireError(decodeFailure(e)))
          if (isTollgateError(e)) return errorResponse(wireError(e))
        }
        if (Cause.isInterruptedOnly(cause)) return yield* Effect.failCause(cause)
        // The database refused or dropped a connection (src/store/storeFaults.ts): 503, not 500.
        const unavailable = storeUnavailableIn(cause)
        if (unavailable !== undefined) return errorResponse(wireError(unavailable))
        yield* logDefect(cause)
        return internalError
      })
    )
  )

/** The admin API's answers, errors included, are never cached (they carry keys, sessions, CSRF tokens). */
const adminNoStore = <E, R>(app: Effect.Effect<HttpServerResponse.HttpServerResponse, E, R>) =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (req) =>
    req.url.startsWith("/admin/") ? Effect.map(app, HttpServerResponse.setHeader("cache-control", "no-store")) : app
  )

/**
 * The whole app, built once in the services' context: the HttpRouter handlers and the HttpApi's
 * routes (./apiRoutes.ts), the catch-all, and per request one metric update and one access log line.
 */
export const makeApp = Effect.map(apiRouter, (api) =>
  // A path parameter up to 1,024 characters (find-my-way's default is 100): an end user's name is up
  // to 256 (issue 41), percent-encoded up to three times that; the schemas bound each parameter.
  observed(adminNoStore(HttpRouter.withRouterConfig(withCatchAll(HttpRouter.concat(router, api)), { maxParamLength: 1024 })))
)
