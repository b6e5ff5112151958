/**
 * A streamed governed call: the upstream stream opened under the hold, its chunks forwarded as they
 * arrive, its progress marked for crash recovery, and one settlement however it ends.
 */
import { Cause, Deferred, Effect, Exit, FiberId, Runtime, Scope } from "effect"
import { chargedTokens, countedTokens, type UsageReport } from "../../../spec/pricing.ts"
import type { GovernanceError } from "../../domain/errors.ts"
import { type DataEvents, UpstreamFailure } from "../../providers/Provider.ts"
import { timeline } from "../../domain/timeline.ts"
import type { Served, StartedStream } from "../Router.ts"
import { deliveredText } from "../surfaces/Surface.ts"
import { countBounded } from "../Tokenizer.ts"
import type { InFlight } from "./inflight.ts"
import type { Charged, Settlement } from "./settlement.ts"
import type { GatewayContext, GatewayReply, SseReply } from "./types.ts"

const NONE: ReadonlyArray<Uint8Array> = []

/**
 * Frames as one write: a lone frame (an upstream read usually carries one event) as it is, uncopied.
 * Not `Buffer.concat`: under 4 KiB its result is a view of a shared 8 KiB pool, and the stored replay
 * crosses to the store worker, whose structured clone copies a view's whole backing buffer.
 */
const concat = (frames: ReadonlyArray<Uint8Array>): Uint8Array => {
  if (frames.length === 1) return frames[0]!
  let length = 0
  for (const f of frames) length += f.byteLength
  const out = new Uint8Array(length)
  let at = 0
  for (const f of frames) {
    out.set(f, at)
    at += f.byteLength
  }
  return out
}

export const makeStreaming = (ctx: GatewayContext, settlement: Settlement) => {
  const { span, store } = ctx
  const { abandon, settle, fromRouteFailure } = settlement

  /**
   * Stream: chunks are forwarded as they arrive; the surface decides what the client sees and puts
   * the governance on the last event once the charge settles. A stream cut by the upstream or by
   * the client is charged for what was delivered (counted), never zero once a token went out; a
   * failure before any token charges nothing.
   *
   * The reply is the call's answer the moment the upstream stream opens, from the transport's
   * callback, when the reservation is already on disk — the client's first byte then does not wait
   * for this fiber to resume and return (docs/decisions/0031). Everything the reply needs is set up
   * before the upstream opens. When the reservation's fsync is still running then, the fiber returns
   * the reply once it is done.
   *
   * `underway`: the upstream request, already on its way (it left from the reservation's callback:
   * docs/decisions/0039); this fiber takes its opening.
   */
  const completeStreaming = (f: InFlight, underway: StartedStream): Effect.Effect<GatewayReply, GovernanceError> =>
    Effect.gen(function* () {
      const p = f.plan
      // The reservation is committed, durable against a crash of the process; its fsync runs while
      // the upstream opens, and the stream's headers wait for it (docs/decisions/0013).
      // By the store's callback (docs/decisions/0038): `synced` is how it ended once it answered, and
      // `durable` what the one effect that may wait for it awaits.
      let synced: Exit.Exit<void> | undefined
      const durable = Deferred.unsafeMake<void>(FiberId.none)
      store.syncThen((outcome) => {
        synced = outcome
        Deferred.unsafeDone(durable, outcome)
      })
      /** The reservation is on disk: the sync answered so. */
      const onDisk = (): boolean => synced !== undefined && Exit.isSuccess(synced)
      const connection = yield* Scope.make()
      const clock = yield* Effect.clock
      // Set up while the upstream opens, not after: from the open on, every step is on the way to the first byte.
      const renderer = p.surface.streamRenderer({ includeUsage: p.request.includeUsage, requestId: p.requestId, nowMs: clock.unsafeCurrentTimeMillis() })
      const run = Runtime.runPromise(yield* Effect.runtime<never>())
      /** The route that serves the stream and its attempts (the open's callback's, then the Router's own), and its events. */
      let served: Served<DataEvents> | undefined
      let events: AsyncIterator<ReadonlyArray<string>> | undefined
      // However the connection closes (a failed open, the stream's end, a cancel, shutdown), there is no
      // more progress to mark and nothing to cancel, and the upstream read ends — also when the
      // transport's own finalizer is not in the scope yet (a stream delivered from the open's callback
      // before its fiber resumed). The call stays in flight (the Gateway's registry) until it is settled.
      yield* Scope.addFinalizer(connection, Effect.sync(() => ((f.progress = undefined), (f.stop = undefined), void events?.return?.())))
      // Every frame sent, kept only when an idempotency key will store the stream for replay.
      const keep = p.idempotency !== undefined
      const sent: Array<Uint8Array> = []
      const record = (frames: ReadonlyArray<Uint8Array>): ReadonlyArray<Uint8Array> => {
        if (keep) for (const f of frames) sent.push(f)
        return frames
      }
      let delivered = ""
      let usage: UsageReport | undefined
      let schemaOk = true
      let settled = false
      let markedLength = 0
      const progress = () => {
        if (settled || delivered.length === markedLength || served === undefined) return undefined
        markedLength = delivered.length
        // Uncached: a stream's prefix never repeats, and caching one per beat would push out the prompts the cache is for.
        const tokens = countedTokens(p.inputTokens, countBounded(delivered))
        return { route: served.route.name, rateCardVersion: p.prices.get(served.route.name)!.version, tokens, at: 0 }
      }

      const onEvent = (data: string): ReadonlyArray<Uint8Array> => {
        let json: Record<string, unknown> | undefined
        try {
          const parsed: unknown = JSON.parse(data)
          json = parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : undefined
        } catch {
          json = undefined
        }
        if (json === undefined) {
          schemaOk = false
        } else {
          if (json.usage !== null && typeof json.usage === "object") usage = json.usage as typeof usage
          if (Array.isArray(json.choices)) for (const c of json.choices as ReadonlyArray<{ delta?: unknown }>) delivered += deliveredText(c?.delta)
        }
        return record(renderer.onChunk(data, json))
      }

      /**
       * Settle once, however the stream ends: the last frames to send. By the store's callback (no
       * fiber, docs/decisions/0038); a stream that delivered nothing is voided.
       * Async: a throw of ours is its rejection, never an exception in the caller's way (`close`).
       */
      const finish = async (how: "complete" | "cut" | "disconnect", failure?: UpstreamFailure): Promise<ReadonlyArray<Uint8Array>> => {
        if (settled) return NONE
        settled = true
        // Set before any frame is read (`begin`): frames are only read once the stream was served.
        const { route, attempts } = served!
        const { tokens, source } = chargedTokens(how === "complete" ? usage : undefined, p.inputTokens, () => countBounded(delivered))
        if (delivered.length === 0 && how !== "complete") {
          const message = failure?.message ?? "the client disconnected before any token was delivered"
          return run(
            Effect.as(
              abandon(f, how === "cut" ? "route_unavailable" : "client_disconnected", message, attempts),
              renderer.broken(`The upstream stream failed before any token: ${message}. Nothing was charged.`, undefined)
            )
          )
        }
        let tail: ReadonlyArray<Uint8Array> = NONE
        const charged: Charged = {
          served: { route, attempts },
          tokens,
          usageSource: source,
          schemaOk: schemaOk && how === "complete",
          render: (g) => {
            tail =
              how === "complete"
                ? renderer.complete(g, tokens)
                : renderer.broken(`The upstream stream broke: ${failure?.message ?? "client disconnected"}. Delivered tokens were charged.`, g)
            return { status: 200, contentType: "text/event-stream", body: keep ? concat([...sent, ...tail]) : new Uint8Array() }
          }
        }
        return new Promise((resolve, reject) =>
          settle(f, charged, clock.unsafeCurrentTimeMillis(), (written) => (Exit.isSuccess(written) ? resolve(tail) : reject(Cause.squash(written.cause))))
        )
      }

      // The per-event path is plain JavaScript over an async iterable: an Effect Stream would cost
      // ≈ 50–100 µs of CPU per element pulled (bench/README.md). Effects run only to settle.
      // Every stream that began ends here, settled (or voided) once: only then is it out of the
      // Gateway's registry, which shutdown waits to empty (Gateway.stopCalls) — a stream it stopped is
      // still being settled after its connection closed. The connection closes however the settlement ended.
      const close = () => finish("disconnect").finally(() => run(Scope.close(connection, Exit.void)))
      let started = false
      let cancelled = false
      const cancel = () => {
        if (cancelled) return
        cancelled = true
        // Never iterated: settle here. Iterating: closing the connection ends the upstream read
        // below, which then settles as a disconnect.
        if (started) return void run(Scope.close(connection, Exit.void))
        // Nobody awaits this settlement: a failure of it (the store gone under shutdown) is logged, and
        // the hold left to the recovery sweep, rather than an unhandled rejection.
        void close().catch((e: unknown) => run(Effect.logError("a cancelled stream's settlement failed", Cause.pretty(Cause.die(e)))))
      }
      // Shutdown past its grace ends the stream as an upstream cut does: the client gets the broken
      // stream's last event, with the charge for what it was delivered (nothing delivered: voided).
      let stopping = false
      const stop = () => {
        if (cancelled || stopping) return
        if (!started) return cancel()
        stopping = true
        void run(Scope.close(connection, Exit.void))
      }
      const frames: AsyncIterable<Uint8Array> = {
        async *[Symbol.asyncIterator]() {
          started = true
          try {
            let ended: "complete" | "cut" = "complete"
            let failure: UpstreamFailure | undefined
            try {
              for await (const batch of { [Symbol.asyncIterator]: () => events! }) {
                if (cancelled) break
                const out: Array<Uint8Array> = []
                for (const data of batch) for (const frame of onEvent(data)) out.push(frame)
                if (out.length > 0) yield concat(out)
              }
            } catch (e) {
              ended = "cut"
              failure = e instanceof UpstreamFailure ? e : undefined
            }
            if (stopping) {
              ended = "cut"
              failure = new UpstreamFailure({ reason: "protocol", message: "the gateway is shutting down", retryable: true })
            }
            const tail = await finish(cancelled ? "disconnect" : ended, failure)
            if (tail.length > 0 && !cancelled) yield concat(tail)
          } finally {
            // However the iteration stops (the client went away, the consumer returned): settle once.
            await close()
          }
        }
      }
      const reply: SseReply = { _tag: "Sse", frames, cancel }

      /** The stream is the client's from here: kept alive until settled, marked by the heartbeat, ended by shutdown. */
      const begin = (s: Served<DataEvents>) => {
        // The one step that could throw first; then only registrations.
        events = s.value[Symbol.asyncIterator]()
        served = s
        f.progress = progress
        f.stop = stop
      }
      // The open's callback: deliver at once if the reservation is on disk (usually, its fsync ran
      // while the upstream opened). From then on the hold is the stream's to settle, whatever this
      // fiber meets before it resumes (`delivering`: `abandonInterrupted` leaves the hold alone).
      const opened = (s: Served<DataEvents>): boolean => {
        if (!onDisk()) return false
        begin(s)
        // Delivered from here (`deliver` never throws).
        f.delivering = true
        timeline.mark("upstream stream open (headers)")
        f.answer(Exit.succeed(reply))
        return true
      }
      const early = () => f.delivering

      const opening = yield* underway.take(opened).pipe(
        span("tollgate.upstream_open", { kind: "client", attributes: { "tollgate.request_id": p.requestId } }),
        Scope.extend(connection),
        Effect.onExit((exit) => (Exit.isSuccess(exit) || early() ? Effect.void : Scope.close(connection, Exit.void))),
        Effect.tapDefect(() => (early() ? Effect.void : abandon(f, "internal_error", "The gateway failed while calling the upstream; nothing was charged.", []))),
        Effect.catchAll((failed) => fromRouteFailure(f, failed))
      )
      if (early()) {
        // Already delivering: the Router's own record of the attempts replaces the callback's.
        served = opening
        return reply
      }
      timeline.mark("upstream stream open (headers)")
      // Usually the sync is long done when the headers come (its fsync ran while the upstream
      // opened): then there is nothing to wait for, and no effect waits for it.
      if (!onDisk()) {
        yield* Deferred.await(durable).pipe(
          Effect.tapDefect(() =>
            Effect.zipRight(Scope.close(connection, Exit.void), abandon(f, "internal_error", "The gateway could not make the reservation durable; nothing was charged.", opening.attempts))
          ),
          // Shutdown while it waits: the upstream connection closes here (the Gateway voids the hold).
          Effect.onInterrupt(() => Scope.close(connection, Exit.void))
        )
      }
      timeline.mark("reservation on disk (after the upstream opened)")
      begin(opening)
      return reply
    })

  return completeStreaming
}
