/**
 * The HTTP surface besides the two governed calls, on @effect/platform's HttpRouter, composed from its
 * parts by job: the public routes (./publicRoutes.ts), the admin API (./adminRoutes.ts,
 * ./dashboard.ts), and observability (./observability.ts). Every failure, including unknown routes and
 * defects, leaves through src/http/errors.ts as an OpenAI error body. The governed endpoints are served
 * only by src/http/fast.ts, from the governed adapter (./governed.ts).
 */
import { HttpRouter, HttpServerRequest } from "@effect/platform"
import { Cause, Effect, Option } from "effect"
import { adminRoutes } from "./adminRoutes.ts"
import { dashboardRoutes } from "./dashboard.ts"
import { internalError, logDefect, unknownRoute } from "./errors.ts"
import { metricsRoutes, observed } from "./observability.ts"
import { publicRoutes } from "./publicRoutes.ts"

// What src/http/fast.ts takes from the app (it is owned with the fast path; the names stay here).
export { type GovernedCall, governedCalls, handleGoverned } from "./governed.ts"
export { logAccess } from "./observability.ts"

export const router = publicRoutes.pipe(
  HttpRouter.concat(metricsRoutes),
  HttpRouter.concat(adminRoutes),
  HttpRouter.concat(dashboardRoutes)
)

/** Exit to response: an unknown route is a 404, a defect a logged generic 500; an interruption stays one. */
const withCatchAll = router.pipe(
  Effect.catchAllCause((cause) =>
    Effect.gen(function* () {
      const req = yield* HttpServerRequest.HttpServerRequest
      const failure = Cause.failureOption(cause)
      if (Option.isSome(failure) && (failure.value as { _tag?: string })._tag === "RouteNotFound") return unknownRoute(req.method, req.url)
      if (Cause.isInterruptedOnly(cause)) return yield* Effect.failCause(cause)
      yield* logDefect(cause)
      return internalError
    })
  )
)

/** The whole app: the router, the catch-all, and per request one metric update and one access log line. */
export const app = observed(withCatchAll)
