/**
 * The /docs page: @effect/platform's Scalar page for the same HttpApi as /openapi.json, with Scalar's
 * script inlined (`HttpApiScalar.layerHttpLayerRouter` embeds it; the `…Cdn` layers would load it from
 * jsDelivr) and its default web fonts off, so it loads nothing from another origin and works with no
 * network. The script is ≈ 3.4 MB: the server bundle does not contain this module. scripts/build.mjs
 * renders the page into dist/docs.html (`renderScalarPage`), and ./docs.ts serves that file, or, run
 * from source, imports this module on the first request.
 */
import * as HttpApiScalar from "@effect/platform/HttpApiScalar"
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect } from "effect"
import { PublicApi } from "./api.ts"

const scalar = HttpApiScalar.layerHttpLayerRouter({
  api: PublicApi,
  path: "/docs",
  scalar: { withDefaultFonts: false, hideTestRequestButton: true }
})

/** The page's response, built through the platform's own route. */
export const scalarPage = Effect.scoped(Effect.flatMap(HttpLayerRouter.toHttpEffect(scalar), (handler) => handler))

/** The page's bytes, for the build to write beside the bundle: the route answering a GET /docs. */
export const renderScalarPage = (): Promise<Uint8Array> =>
  Effect.runPromise(
    Effect.flatMap(scalarPage, (response) =>
      response.body._tag === "Uint8Array" ? Effect.succeed(response.body.body) : Effect.dieMessage(`unexpected /docs body: ${response.body._tag}`)
    ).pipe(Effect.provideService(HttpServerRequest.HttpServerRequest, HttpServerRequest.fromWeb(new Request("http://localhost/docs"))))
  )
