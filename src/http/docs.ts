/**
 * GET /docs: @effect/platform's Scalar page for the same HttpApi as /openapi.json, with Scalar's
 * script inlined in the page (`HttpApiScalar.layerHttpLayerRouter` embeds it; the `…Cdn` layers
 * would load it from jsDelivr) and its default web fonts off, so it loads nothing from another
 * origin and works on a machine with no network. The page (≈ 3.4 MB) is built on its first request
 * and kept.
 */
import { HttpApiScalar, HttpLayerRouter } from "@effect/platform"
import { Effect } from "effect"
import { PublicApi } from "./api.ts"

const scalar = HttpApiScalar.layerHttpLayerRouter({
  api: PublicApi,
  path: "/docs",
  scalar: { withDefaultFonts: false, hideTestRequestButton: true }
})

/** The Scalar page's response, built once through the platform's own route. */
export const docsPage = Effect.runSync(
  Effect.cached(Effect.scoped(Effect.flatMap(HttpLayerRouter.toHttpEffect(scalar), (handler) => handler)))
)
