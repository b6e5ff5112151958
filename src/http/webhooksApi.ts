/**
 * The webhooks and events endpoints of the admin API (issue 42; docs/contract.md "Webhooks"), as an
 * HttpApi group for the OpenAPI document; served by src/http/webhooksRoutes.ts. The group's
 * middleware (AdminAuth) is added where the admin groups are assembled (src/http/adminApi.ts), as is
 * its 429. Operator only: a team session's calls answer 403.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { AdminForbidden, AdminNotFound, InvalidRequest } from "../domain/errors.ts"
import { adminErrorAt, PageParams, PathId } from "./adminParams.ts"
import { errorBodyOf } from "./schemas.ts"

const E = {
  invalidRequest: adminErrorAt(InvalidRequest, "malformed JSON or fields (param names the field)"),
  forbidden: adminErrorAt(AdminForbidden, "a team session is read-only; invalid_csrf_token: a cookie-authenticated write without the session's X-CSRF-Token"),
  notFound: errorBodyOf(AdminNotFound, "unknown webhook endpoint or delivery id", "WebhookError")
}

const Iso = Schema.String.annotations({ description: "ISO 8601" })

export const WebhookEndpoint = Schema.Struct({
  id: Schema.String.annotations({ description: "whe_…" }),
  object: Schema.Literal("webhook_endpoint"),
  url: Schema.String,
  events: Schema.Array(Schema.String).annotations({ description: "The event types sent, or [\"*\"] for all." }),
  project_id: Schema.NullOr(Schema.String).annotations({ description: "Only this project's events; null: every project's (of `organization` when set)." }),
  organization: Schema.NullOr(Schema.String),
  description: Schema.NullOr(Schema.String),
  enabled: Schema.Boolean,
  created_at: Iso,
  updated_at: Iso
}).annotations({ identifier: "WebhookEndpoint" })

export const WebhookEndpointWithSecret = Schema.Struct({
  ...WebhookEndpoint.fields,
  secret: Schema.String.annotations({ description: "whsec_…: the Standard Webhooks signing secret, shown ONCE (here); stored encrypted." })
}).annotations({ identifier: "WebhookEndpointWithSecret" })

export const WebhookDelivery = Schema.Struct({
  id: Schema.String.annotations({ description: "del_…" }),
  object: Schema.Literal("webhook_delivery"),
  endpoint_id: Schema.String,
  event_id: Schema.String.annotations({ description: "evt_…: the webhook-id header, the same on every attempt." }),
  event_type: Schema.String,
  status: Schema.Literal("pending", "delivered", "failed"),
  attempts: Schema.Int,
  last_status_code: Schema.NullOr(Schema.Int),
  last_error: Schema.NullOr(Schema.String),
  last_latency_ms: Schema.NullOr(Schema.Int),
  last_attempt_at: Schema.NullOr(Iso),
  next_attempt_at: Schema.NullOr(Iso).annotations({ description: "When a pending delivery is tried next (it also waits for its endpoint's earlier deliveries)." }),
  delivered_at: Schema.NullOr(Iso),
  created_at: Iso
}).annotations({ identifier: "WebhookDelivery" })

export const Event = Schema.Struct({
  id: Schema.String.annotations({ description: "evt_…" }),
  object: Schema.Literal("event"),
  type: Schema.String,
  project_id: Schema.NullOr(Schema.String),
  organization: Schema.NullOr(Schema.String),
  created_at: Iso,
  data: Schema.Unknown
}).annotations({ identifier: "Event" })

const list = <A, I, R>(item: Schema.Schema<A, I, R>, identifier: string, description: string) =>
  Schema.Struct({ object: Schema.Literal("list"), data: Schema.Array(item), has_more: Schema.Boolean, next_cursor: Schema.NullOr(Schema.String) }).annotations({ identifier, description })

export const WebhookEndpointList = list(WebhookEndpoint, "WebhookEndpointList", "Oldest first.")
export const WebhookDeliveryList = list(WebhookDelivery, "WebhookDeliveryList", "Newest first.")
export const EventList = list(Event, "EventList", "Oldest first.")

/** The bodies, decoded loosely: every field is checked by the service, each refusal a 400 naming it. */
export const NewWebhookEndpoint = Schema.Struct({
  url: Schema.String,
  events: Schema.Array(Schema.String),
  project_id: Schema.optional(Schema.String),
  organization: Schema.optional(Schema.String),
  description: Schema.optional(Schema.String),
  enabled: Schema.optional(Schema.Boolean)
})

export const WebhookEndpointPatch = Schema.Struct({
  url: Schema.optional(Schema.String),
  events: Schema.optional(Schema.Array(Schema.String)),
  description: Schema.optional(Schema.String),
  enabled: Schema.optional(Schema.Boolean)
})

const EndpointPath = Schema.Struct({ id: PathId("A webhook endpoint id, whe_…") })
const DeliveryPath = Schema.Struct({ id: PathId("A webhook endpoint id, whe_…"), delivery_id: PathId("A delivery id, del_…") })

export const webhooksGroup = HttpApiGroup.make("webhooks")
  .add(
    HttpApiEndpoint.post("createWebhook", "/admin/v1/webhooks")
      .setPayload(NewWebhookEndpoint)
      .addSuccess(WebhookEndpointWithSecret, { status: 201 })
      .addError(E.invalidRequest)
      .addError(E.forbidden)
      .annotate(OpenApi.Description, "Register an endpoint. The URL must be https (http and private addresses only with TOLLGATE_WEBHOOK_ALLOW_PRIVATE=1). The signing secret is in this answer only.")
  )
  .add(HttpApiEndpoint.get("listWebhooks", "/admin/v1/webhooks").setUrlParams(Schema.Struct(PageParams)).addSuccess(WebhookEndpointList).addError(E.invalidRequest).addError(E.forbidden))
  .add(HttpApiEndpoint.get("getWebhook", "/admin/v1/webhooks/:id").setPath(EndpointPath).addSuccess(WebhookEndpoint).addError(E.notFound).addError(E.forbidden))
  .add(
    HttpApiEndpoint.patch("updateWebhook", "/admin/v1/webhooks/:id")
      .setPath(EndpointPath)
      .setPayload(WebhookEndpointPatch)
      .addSuccess(WebhookEndpoint)
      .addError(E.invalidRequest)
      .addError(E.forbidden)
      .addError(E.notFound)
  )
  .add(
    HttpApiEndpoint.del("deleteWebhook", "/admin/v1/webhooks/:id")
      .setPath(EndpointPath)
      .addSuccess(Schema.Struct({ id: Schema.String, object: Schema.Literal("webhook_endpoint"), deleted: Schema.Literal(true) }).annotations({ identifier: "DeletedWebhookEndpoint" }))
      .addError(E.forbidden)
      .addError(E.notFound)
      .annotate(OpenApi.Description, "Delete an endpoint and its delivery log; its pending deliveries are dropped.")
  )
  .add(
    HttpApiEndpoint.post("rotateWebhookSecret", "/admin/v1/webhooks/:id/rotate_secret")
      .setPath(EndpointPath)
      .addSuccess(WebhookEndpointWithSecret)
      .addError(E.forbidden)
      .addError(E.notFound)
      .annotate(OpenApi.Description, "A new signing secret, shown once; every delivery from now on is signed with it.")
  )
  .add(
    HttpApiEndpoint.get("listWebhookDeliveries", "/admin/v1/webhooks/:id/deliveries")
      .setPath(EndpointPath)
      .setUrlParams(Schema.Struct(PageParams))
      .addSuccess(WebhookDeliveryList)
      .addError(E.invalidRequest)
      .addError(E.forbidden)
      .addError(E.notFound)
  )
  .add(
    HttpApiEndpoint.post("retryWebhookDelivery", "/admin/v1/webhooks/:id/deliveries/:delivery_id/retry")
      .setPath(DeliveryPath)
      .addSuccess(WebhookDelivery, { status: 201 })
      .addError(E.invalidRequest)
      .addError(E.forbidden)
      .addError(E.notFound)
      .annotate(OpenApi.Description, "Send again: a new delivery of the same event (same webhook-id) to this endpoint, due now, after the endpoint's pending ones.")
  )
  .add(
    HttpApiEndpoint.get("listEvents", "/admin/v1/events")
      .setUrlParams(
        Schema.Struct({
          type: Schema.optional(Schema.String.annotations({ description: "Only events of this type" })),
          since: Schema.optional(Schema.String.annotations({ description: "Only events at or after this ISO 8601 instant" })),
          ...PageParams
        })
      )
      .addSuccess(EventList)
      .addError(E.invalidRequest)
      .addError(E.forbidden)
  )
