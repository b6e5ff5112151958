/**
 * Webhook endpoints, as the admin API manages them (issue 42; docs/contract.md "Webhooks"): create
 * (the signing secret shown once), list, read, change, delete, rotate the secret; an endpoint's
 * delivery log, and "send again". Every field is checked here, a refusal a 400 naming its field.
 * Delivery itself is src/services/WebhookWorker.ts's.
 */
import { Clock, Effect, Option } from "effect"
import { AdminNotFound, InvalidRequest } from "../domain/errors.ts"
import { randomBase32 } from "../domain/ids.ts"
import { cursorPosition, type Page, pageOf, type PageRequest } from "../domain/paging.ts"
import { type DeliveryRow, type EndpointRow, WebhooksRepo } from "../store/webhooksRepo.ts"
import { EVENT_TYPES } from "./Events.ts"
import { newSigningSecret, WebhookSecrets, WebhookSettings } from "./WebhookSecrets.ts"
import { checkEndpointUrl } from "./WebhookUrls.ts"

export interface EndpointView {
  readonly id: string
  readonly object: "webhook_endpoint"
  readonly url: string
  readonly events: ReadonlyArray<string>
  readonly project_id: string | null
  readonly organization: string | null
  readonly description: string | null
  readonly enabled: boolean
  readonly created_at: string
  readonly updated_at: string
}

export interface DeliveryView {
  readonly id: string
  readonly object: "webhook_delivery"
  readonly endpoint_id: string
  readonly event_id: string
  readonly event_type: string
  readonly status: "pending" | "delivered" | "failed"
  readonly attempts: number
  readonly last_status_code: number | null
  readonly last_error: string | null
  readonly last_latency_ms: number | null
  readonly last_attempt_at: string | null
  readonly next_attempt_at: string | null
  readonly delivered_at: string | null
  readonly created_at: string
}

export interface NewEndpoint {
  readonly url: string
  readonly events: ReadonlyArray<string>
  readonly project_id?: string | undefined
  readonly organization?: string | undefined
  readonly description?: string | undefined
  readonly enabled?: boolean | undefined
}

export interface EndpointPatch {
  readonly url?: string | undefined
  readonly events?: ReadonlyArray<string> | undefined
  readonly description?: string | undefined
  readonly enabled?: boolean | undefined
}

const iso = (ms: number | string | null): string | null => (ms === null ? null : new Date(Number(ms)).toISOString())

const toEndpoint = (r: EndpointRow): EndpointView => ({
  id: r.id,
  object: "webhook_endpoint",
  url: r.url,
  events: JSON.parse(r.events) as Array<string>,
  project_id: r.project_id,
  organization: r.organization,
  description: r.description,
  enabled: Number(r.enabled) === 1,
  created_at: iso(r.created_at)!,
  updated_at: iso(r.updated_at)!
})

export const deliveryId = (seq: number | string): string => `del_${seq}`

const toDelivery = (r: DeliveryRow & { event_type: string }): DeliveryView => ({
  id: deliveryId(r.seq),
  object: "webhook_delivery",
  endpoint_id: r.endpoint_id,
  event_id: r.event_id,
  event_type: r.event_type,
  status: r.status,
  attempts: Number(r.attempts),
  last_status_code: r.last_status === null ? null : Number(r.last_status),
  last_error: r.last_error,
  last_latency_ms: r.last_latency_ms === null ? null : Number(r.last_latency_ms),
  last_attempt_at: iso(r.last_attempt_at),
  next_attempt_at: r.status === "pending" ? iso(r.next_attempt_at) : null,
  delivered_at: iso(r.delivered_at),
  created_at: iso(r.created_at)!
})

const invalid = (param: string, message: string) => new InvalidRequest({ message, param })

/** `events`: 1 to 20 known types, or ["*"]; no repeats. */
const checkEvents = (events: ReadonlyArray<string>): Effect.Effect<ReadonlyArray<string>, InvalidRequest> => {
  if (events.length === 0 || events.length > 20) return Effect.fail(invalid("events", "events must list 1 to 20 event types, or [\"*\"] for all."))
  const known: ReadonlyArray<string> = ["*", ...EVENT_TYPES]
  const bad = events.findIndex((e) => !known.includes(e))
  if (bad >= 0) return Effect.fail(invalid(`events[${bad}]`, `events[${bad}] must be one of ${known.join(", ")}.`))
  if (new Set(events).size !== events.length) return Effect.fail(invalid("events", "events must not repeat a type."))
  return Effect.succeed(events)
}

const checkDescription = (d: string | undefined): Effect.Effect<string | null, InvalidRequest> =>
  d === undefined ? Effect.succeed(null) : d.length > 256 || /[\u0000-\u001f]/.test(d) ? Effect.fail(invalid("description", "description must be at most 256 characters, without control characters.")) : Effect.succeed(d)

export class Webhooks extends Effect.Service<Webhooks>()("tollgate/Webhooks", {
  effect: Effect.gen(function* () {
    const repo = yield* WebhooksRepo
    const secrets = yield* WebhookSecrets
    const config = yield* WebhookSettings

    const checkUrl = (url: string) => {
      const checked = checkEndpointUrl(url, config.allowPrivate)
      return typeof checked === "string" ? Effect.fail(invalid("url", checked)) : Effect.succeed(checked.toString())
    }

    const find = (id: string): Effect.Effect<EndpointRow, AdminNotFound> =>
      Effect.flatMap(Effect.orDie(repo.findEndpoint(id)), ([row]) => (row === undefined ? Effect.fail(new AdminNotFound({ message: `No webhook endpoint with id ${id}.` })) : Effect.succeed(row)))

    const create = (input: NewEndpoint): Effect.Effect<EndpointView & { readonly secret: string }, InvalidRequest> =>
      Effect.gen(function* () {
        const url = yield* checkUrl(input.url)
        const events = yield* checkEvents(input.events)
        const description = yield* checkDescription(input.description)
        if (input.project_id !== undefined) {
          const [project] = yield* Effect.orDie(repo.project(input.project_id))
          if (project === undefined) return yield* invalid("project_id", `No project with id ${input.project_id}.`)
        }
        if (input.organization !== undefined && !/^[A-Za-z0-9_-]{1,64}$/.test(input.organization)) {
          return yield* invalid("organization", "organization must be an organization id (letters, digits, _ and -).")
        }
        const now = yield* Clock.currentTimeMillis
        const id = `whe_${randomBase32(12)}`
        const secret = newSigningSecret()
        const row: EndpointRow = {
          id,
          url,
          events: JSON.stringify(events),
          project_id: input.project_id ?? null,
          organization: input.organization ?? null,
          description,
          secret: secrets.seal(id, secret),
          enabled: input.enabled === false ? 0 : 1,
          created_at: now,
          updated_at: now
        }
        yield* Effect.orDie(repo.insertEndpoint(row))
        return { ...toEndpoint(row), secret }
      })

    const get = (id: string) => Effect.map(find(id), toEndpoint)

    const update = (id: string, patch: EndpointPatch): Effect.Effect<EndpointView, AdminNotFound | InvalidRequest> =>
      Effect.gen(function* () {
        const row = yield* find(id)
        const url = patch.url === undefined ? row.url : yield* checkUrl(patch.url)
        const events = patch.events === undefined ? row.events : JSON.stringify(yield* checkEvents(patch.events))
        const description = patch.description === undefined ? row.description : yield* checkDescription(patch.description)
        const enabled = patch.enabled === undefined ? Number(row.enabled) : patch.enabled ? 1 : 0
        const now = yield* Clock.currentTimeMillis
        yield* Effect.orDie(repo.updateEndpoint(id, { url, events, description, enabled, updated_at: now }))
        return yield* get(id)
      })

    const remove = (id: string): Effect.Effect<{ readonly id: string; readonly object: "webhook_endpoint"; readonly deleted: true }, AdminNotFound> =>
      Effect.flatMap(Effect.orDie(repo.deleteEndpoint(id)), (rows) =>
        rows.length === 0 ? Effect.fail(new AdminNotFound({ message: `No webhook endpoint with id ${id}.` })) : Effect.succeed({ id, object: "webhook_endpoint" as const, deleted: true as const })
      )

    /** A new secret, shown once; deliveries from now on are signed with it (one in flight may still carry the old one). */
    const rotateSecret = (id: string): Effect.Effect<EndpointView & { readonly secret: string }, AdminNotFound> =>
      Effect.gen(function* () {
        yield* find(id)
        const secret = newSigningSecret()
        const now = yield* Clock.currentTimeMillis
        yield* Effect.orDie(repo.setSecret(id, secrets.seal(id, secret), now))
        return { ...(yield* get(id)), secret }
      })

    const list = (request: PageRequest): Effect.Effect<Page<EndpointView>, InvalidRequest> =>
      Effect.gen(function* () {
        const position = yield* cursorPosition(request, (cursor) => Effect.orDie(repo.endpointPosition(cursor)))
        const rows = yield* Effect.orDie(repo.endpoints(position, request.limit + 1))
        return pageOf(rows, request.limit, toEndpoint)
      })

    const parseDeliveryId = (param: string, id: string) => {
      const m = /^del_(\d{1,15})$/.exec(id)
      return m === null ? Effect.fail(invalid(param, `${param} must be a delivery id, del_….`)) : Effect.succeed(Number(m[1]))
    }

    /** An endpoint's deliveries, newest first. The cursor is a delivery id of this endpoint. */
    const deliveries = (id: string, request: PageRequest): Effect.Effect<Page<DeliveryView>, AdminNotFound | InvalidRequest> =>
      Effect.gen(function* () {
        yield* find(id)
        const before = request.cursor === undefined ? undefined : yield* parseDeliveryId("cursor", request.cursor)
        const rows = yield* Effect.orDie(repo.deliveries(id, before, request.limit + 1))
        const page = rows.slice(0, request.limit)
        const hasMore = rows.length > request.limit
        return { data: page.map(toDelivery), has_more: hasMore, next_cursor: hasMore ? deliveryId(page[page.length - 1]!.seq) : null }
      })

    /** "Send again": a new delivery of the delivery's event to its endpoint, due now, queued after the endpoint's pending ones. */
    const retry = (id: string, delivery: string): Effect.Effect<DeliveryView, AdminNotFound | InvalidRequest> =>
      Effect.gen(function* () {
        yield* find(id)
        const seq = yield* parseDeliveryId("delivery_id", delivery)
        const now = yield* Clock.currentTimeMillis
        const [made] = yield* Effect.orDie(repo.retry(id, seq, now))
        if (made === undefined) return yield* new AdminNotFound({ message: `No delivery ${delivery} of webhook endpoint ${id}.` })
        const [row] = yield* Effect.orDie(repo.delivery(id, Number(made.seq)))
        return toDelivery(Option.getOrThrow(Option.fromNullable(row)))
      })

    return { create, get, update, remove, rotateSecret, list, deliveries, retry } as const
  }),
  dependencies: [WebhooksRepo.Default]
}) {}
