/**
 * The webhooks and events endpoints (src/http/webhooksApi.ts) served by HttpApiBuilder: operator only
 * (a team session answers 403), bodies decoded by their payload schemas and checked by the Webhooks
 * service (src/services/Webhooks.ts). AdminAuth is provided where the admin groups are assembled
 * (src/http/adminRoutes.ts).
 */
import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import type { AdminNotFound, InvalidRequest } from "../domain/errors.ts"
import { pageRequest } from "../domain/paging.ts"
import { Events } from "../services/Events.ts"
import { Webhooks } from "../services/Webhooks.ts"
import { AdminCaller } from "./adminApi.ts"
import { PublicApi } from "./api.ts"
import { respondErrors } from "./caller.ts"
import { decodedBody } from "./request.ts"
import { operatorOnly } from "./session.ts"
import { NewWebhookEndpoint, WebhookEndpointPatch } from "./webhooksApi.ts"

const operator = Effect.flatMap(AdminCaller, (caller) => operatorOnly(caller.viewer))

/** `effect` with the Webhooks service, for the operator only. */
const asOperator = <A, E extends AdminNotFound | InvalidRequest, R>(f: (webhooks: Webhooks) => Effect.Effect<A, E, R>) => respondErrors(Effect.zipRight(operator, Effect.flatMap(Webhooks, f)))

export const webhooksRoutes = HttpApiBuilder.group(PublicApi, "webhooks", (handlers) =>
  handlers
    .handleRaw("createWebhook", () =>
      respondErrors(Effect.gen(function* () {
        yield* operator
        const body = yield* decodedBody(NewWebhookEndpoint)
        return yield* (yield* Webhooks).create(body)
      }))
    )
    .handle("listWebhooks", ({ urlParams }) => asOperator((w) => Effect.map(w.list(pageRequest(urlParams)), (page) => ({ object: "list" as const, ...page }))))
    .handle("getWebhook", ({ path }) => asOperator((w) => w.get(path.id)))
    .handleRaw("updateWebhook", ({ path }) =>
      respondErrors(Effect.gen(function* () {
        yield* operator
        const patch = yield* decodedBody(WebhookEndpointPatch)
        return yield* (yield* Webhooks).update(path.id, patch)
      }))
    )
    .handle("deleteWebhook", ({ path }) => asOperator((w) => w.remove(path.id)))
    .handle("rotateWebhookSecret", ({ path }) => asOperator((w) => w.rotateSecret(path.id)))
    .handle("listWebhookDeliveries", ({ path, urlParams }) =>
      asOperator((w) => Effect.map(w.deliveries(path.id, pageRequest(urlParams)), (page) => ({ object: "list" as const, ...page })))
    )
    .handle("retryWebhookDelivery", ({ path }) => asOperator((w) => w.retry(path.id, path.delivery_id)))
    .handle("listEvents", ({ urlParams }) =>
      respondErrors(Effect.zipRight(operator, Effect.flatMap(Events, (events) => Effect.map(events.list(urlParams.type, urlParams.since, pageRequest(urlParams)), (page) => ({ object: "list" as const, ...page })))))
    )
)
