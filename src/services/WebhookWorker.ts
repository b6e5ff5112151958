/**
 * Webhook delivery (issue 42; docs/contract.md "Webhooks"): a background fiber of every instance,
 * never on the governed call path. Each round it claims the due deliveries that head their
 * endpoint's queue (src/store/webhooksRepo.ts: one in flight per endpoint, in order; several
 * instances on PostgreSQL never claim one delivery twice), sends them (at most
 * TOLLGATE_WEBHOOK_CONCURRENCY at once), and writes each outcome under its claim:
 *
 * - a POST of `{id, type, created_at, data}` signed with the endpoint's secret by the
 *   `standardwebhooks` package (headers webhook-id = the event id, the same on every retry,
 *   webhook-timestamp, webhook-signature);
 * - to the address resolved and checked just before (src/services/WebhookUrls.ts), on a fresh
 *   connection to that address; no redirect followed (a 3xx is a failed attempt); 10 s for the whole
 *   attempt; the answer's body read up to 64 KiB and dropped;
 * - 2xx: delivered. Anything else: retried after `retryDelay` (spec/events.ts: exponential, jitter),
 *   until the next try would fall 3 days (TOLLGATE_WEBHOOK_MAX_AGE_MS) after the delivery was made:
 *   then failed, and the endpoint's next event goes.
 *
 * A claim lasts 60 s (an attempt lasts at most 10 s); a process that dies holding claims leaves them
 * to expire, and its own instance's next start releases them at once (they are marked with the
 * epoch, src/services/Instance.ts). So a crash or restart loses no delivery: at least once, each
 * attempt by one instance.
 */
import { Clock, Duration, Effect } from "effect"
import { request as httpRequest } from "node:http"
import { request as httpsRequest } from "node:https"
import { Webhook } from "standardwebhooks"
import { nextAttempt } from "../../spec/events.ts"
import { type AttemptOutcome, type ClaimedDelivery, WebhooksRepo } from "../store/webhooksRepo.ts"
import { BackgroundLane } from "./BackgroundLane.ts"
import { Instance } from "./Instance.ts"
import { WebhookSecrets, WebhookSettings } from "./WebhookSecrets.ts"
import { resolveDestination } from "./WebhookUrls.ts"

/** Counters for /metrics (src/services/Metrics.ts): attempts by outcome, and the outbox's oldest undelivered age at the last round. */
export const webhookStats = {
  outcomes: { delivered: 0, retry: 0, failed: 0 } as Record<"delivered" | "retry" | "failed", number>,
  oldestPendingAgeSeconds: 0
}

const MAX_ANSWER_BYTES = 64 * 1024
/** An event's body larger than this is not sent (the outbox's own events are a few hundred bytes). */
const MAX_BODY_BYTES = 256 * 1024

interface Answer {
  readonly status?: number
  readonly error?: string
}

/** POST `body` to `url`, connecting to `address` only (the socket's lookup answers it); never rejects. */
export const postPinned = (url: URL, address: string, family: 4 | 6, headers: Record<string, string>, body: string, timeoutMs: number): Promise<Answer> =>
  new Promise((resolve) => {
    let done = false
    const finish = (a: Answer) => {
      if (done) return
      done = true
      clearTimeout(timer)
      resolve(a)
    }
    const request = url.protocol === "https:" ? httpsRequest : httpRequest
    const req = request({
      protocol: url.protocol,
      hostname: url.hostname.replace(/^\[(.*)\]$/, "$1"),
      port: url.port === "" ? undefined : Number(url.port),
      path: `${url.pathname}${url.search}`,
      method: "POST",
      headers: { ...headers, "content-length": String(Buffer.byteLength(body)) },
      agent: false,
      lookup: ((_host: string, options: { all?: boolean }, cb: (...args: Array<unknown>) => void) =>
        options.all === true ? cb(null, [{ address, family }]) : cb(null, address, family)) as never
    })
    const timer = setTimeout(() => {
      req.destroy()
      finish({ error: `no answer within ${timeoutMs} ms` })
    }, timeoutMs)
    req.on("response", (res) => {
      let read = 0
      res.on("data", (chunk: Buffer) => {
        read += chunk.length
        if (read > MAX_ANSWER_BYTES) res.destroy()
      })
      res.on("close", () => {
        req.destroy()
        finish({ status: res.statusCode ?? 0 })
      })
      res.on("error", () => finish({ status: res.statusCode ?? 0 }))
    })
    req.on("error", (e) => finish({ error: e.message.slice(0, 200) }))
    req.end(body)
  })

/** The JSON body of a delivery: the event as the outbox holds it. */
export const deliveryBody = (d: Pick<ClaimedDelivery, "event_id" | "event_type" | "event_created_at" | "event_data">): string =>
  JSON.stringify({ id: d.event_id, type: d.event_type, created_at: new Date(Number(d.event_created_at)).toISOString(), data: JSON.parse(d.event_data) })

export class WebhookWorker extends Effect.Service<WebhookWorker>()("tollgate/WebhookWorker", {
  scoped: Effect.gen(function* () {
    const repo = yield* WebhooksRepo
    const secrets = yield* WebhookSecrets
    const config = yield* WebhookSettings
    const instance = yield* Instance
    const token = `epoch:${instance.epoch}`
    // Every statement of the worker takes the background lane: at most one connection, whatever the concurrency of the POSTs.
    const lane = yield* BackgroundLane

    // Claims this instance's earlier processes left: they are dead (this process has the instance id now).
    yield* lane.run(repo.releaseEarlierClaims(instance.instanceId, instance.epoch)).pipe(
      Effect.catchAllCause((cause) => Effect.logWarning("webhooks: could not release the claims of this instance's earlier processes", cause))
    )

    /** One attempt of a claimed delivery, and its outcome written under the claim. */
    const attempt = (d: ClaimedDelivery) =>
      Effect.gen(function* () {
        const start = yield* Clock.currentTimeMillis
        const answer = yield* Effect.promise(async (): Promise<Answer> => {
          const secret = secrets.open(d.endpoint_id, d.secret)
          if (secret === undefined) return { error: "the endpoint's signing secret does not open under this server's webhook key" }
          const body = deliveryBody(d)
          if (Buffer.byteLength(body) > MAX_BODY_BYTES) return { error: `the event's body is over ${MAX_BODY_BYTES} bytes` }
          const url = new URL(d.url)
          const destination = await resolveDestination(url, config.allowPrivate)
          if ("refused" in destination) return { error: `refused: ${destination.refused}` }
          const headers = {
            "content-type": "application/json",
            "user-agent": "Tollgate-Webhooks/1",
            "webhook-id": d.event_id,
            "webhook-timestamp": String(Math.floor(start / 1000)),
            "webhook-signature": new Webhook(secret).sign(d.event_id, new Date(start), body)
          }
          return postPinned(url, destination.address, destination.family, headers, body, config.timeoutMs)
        })
        const end = yield* Clock.currentTimeMillis
        const ok = answer.status !== undefined && answer.status >= 200 && answer.status < 300
        const next = ok ? end : nextAttempt(config.retry, Number(d.created_at), end, Number(d.attempts) + 1, Math.random())
        const outcome: AttemptOutcome = {
          status: ok ? "delivered" : next === "failed" ? "failed" : "pending",
          lastStatus: answer.status ?? null,
          lastError: ok ? null : (answer.error ?? `answered ${answer.status}`),
          latencyMs: end - start,
          at: end,
          nextAttemptAt: next === "failed" ? end : next
        }
        yield* lane.run(repo.complete(d.seq, token, outcome))
        webhookStats.outcomes[ok ? "delivered" : next === "failed" ? "failed" : "retry"]++
      })

    /** One round: the outbox's age, then the due deliveries claimed and attempted; whether any were. */
    const round = Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      const [oldest] = yield* lane.run(repo.oldestPending())
      webhookStats.oldestPendingAgeSeconds = oldest?.oldest == null ? 0 : Math.max(0, (now - Number(oldest.oldest)) / 1000)
      const claimed = yield* lane.run(repo.claim(token, now, now + config.claimMs, config.concurrency))
      yield* Effect.forEach(claimed, attempt, { concurrency: config.concurrency, discard: true })
      return claimed.length > 0
    })

    yield* Effect.forkScoped(
      Effect.forever(
        round.pipe(
          Effect.catchAllCause((cause) => Effect.as(Effect.logWarning("webhooks: a delivery round failed; trying again", cause), false)),
          Effect.flatMap((busy) => (busy ? Effect.void : Effect.sleep(Duration.millis(config.pollMs))))
        )
      )
    )
    return { token } as const
  }),
  dependencies: [WebhooksRepo.Default, BackgroundLane.Default]
}) {}
