/**
 * The routes served by `HttpApiBuilder` from the same HttpApi as /openapi.json (src/http/api.ts):
 * path, query and payload decoded by the endpoints' schemas, successes encoded by them. So far the
 * `public` group (receipt keys, health); the others are still HttpRouter handlers (docs/decisions/0018).
 * Failures leave through the app's catch-all (./app.ts): a domain error as its wire answer, a decode
 * failure as an OpenAI-shaped 400 (`decodeFailure`).
 */
import { HttpApiBuilder, type HttpApiError, HttpRouter } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer } from "effect"
import { InvalidRequest } from "../domain/errors.ts"
import { ReceiptSigner } from "../services/ReceiptSigner.ts"
import { PublicApi } from "./api.ts"

const publicGroup = HttpApiBuilder.group(PublicApi, "public", (handlers) =>
  handlers
    .handle("receiptKeys", () => Effect.flatMap(ReceiptSigner, (signer) => Effect.map(signer.publicKeys, (data) => ({ object: "list" as const, data }))))
    .handle("health", () => Effect.succeed({ status: "ok" as const }))
)

/**
 * The HttpApi's routes as an HttpRouter, built once in the services' context (handlers read the
 * services captured here). The platform types its routes as needing its default services (a route
 * may answer a file); they are provided from Node's. Nothing built here holds a resource, so the
 * build's scope may end with it.
 */
export const apiRouter = Effect.scoped(
  Effect.gen(function* () {
    const context = yield* Layer.build(Layer.merge(Layer.provideMerge(publicGroup, HttpApiBuilder.Router.Live), NodeHttpServer.layerContext))
    const router = yield* Effect.provide(HttpApiBuilder.Router.router, context)
    return router.pipe(HttpRouter.use(Effect.provide(context)))
  })
)

/**
 * A request the schemas refused, as the 400 a client gets: `param` is the path of the first issue
 * (`period`, `rate_limit.burst`), the message the schema's, never the platform's own error body.
 */
export const decodeFailure = (e: HttpApiError.HttpApiDecodeError): InvalidRequest => {
  const issue = e.issues[0]
  const param = issue === undefined || issue.path.length === 0 ? null : issue.path.map(String).join(".")
  const detail = issue === undefined ? e.message : issue.message
  return new InvalidRequest({ message: param === null ? `Invalid request: ${detail}` : `Invalid ${param}: ${detail}`, param })
}
