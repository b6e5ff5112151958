/**
 * A streamed governed call: the upstream stream opened under the hold, its chunks forwarded as they
 * arrive, its progress marked for crash recovery, and one settlement however it ends.
 */
import { Clock, Effect, Exit, Fiber, Runtime, Scope } from "effect"
import { chargedTokens, countedTokens, type UsageReport } from "../../../spec/pricing.ts"
import { upstreamBody } from "../../domain/chat.ts"
import type { GovernanceError } from "../../domain/errors.ts"
import { UpstreamFailure } from "../../providers/Provider.ts"
import { timeline } from "../../domain/timeline.ts"
import type { Principal } from "../KeyRegistry.ts"
import { deliveredText } from "../surfaces/Surface.ts"
import { countBounded } from "../Tokenizer.ts"
import type { Settlement } from "./settlement.ts"
import type { GatewayContext, GatewayReply, Plan } from "./types.ts"

export const makeStreaming = (ctx: GatewayContext, settlement: Settlement) => {
  const { span, store, router, liveCalls, streamMarks, streamCancels } = ctx
  const { abandon, settle, fromRouteFailure } = settlement

  /**
   * Stream: chunks are forwarded as they arrive; the surface decides what the client sees and puts
   * the governance on the last event once the charge settles. A stream cut by the upstream or by
   * the client is charged for what was delivered (counted), never zero once a token went out; a
   * failure before any token charges nothing.
   */
  const completeStreaming = (p: Plan, principal: Principal): Effect.Effect<GatewayReply, GovernanceError> =>
    Effect.gen(function* () {
      // The reservation is committed, durable against a crash of the process; its fsync runs while
      // the upstream opens, and the stream's headers wait for it (docs/decisions/0013).
      const durable = store.sync === undefined ? undefined : yield* Effect.fork(store.sync())
      const connection = yield* Scope.make()
      const served = yield* router.openStream(p.chain, () => upstreamBody(p.body, p.request, p.outputCap)).pipe(
        span("tollgate.upstream_open", { kind: "client", attributes: { "tollgate.request_id": p.requestId } }),
        Scope.extend(connection),
        Effect.onExit((exit) => (Exit.isSuccess(exit) ? Effect.void : Scope.close(connection, Exit.void))),
        Effect.tapDefect(() => abandon(p, "internal_error", "The gateway failed while calling the upstream; nothing was charged.", [])),
        Effect.catchAll((failed) => fromRouteFailure(p, failed))
      )
      timeline.mark("upstream stream open (headers)")
      if (durable !== undefined) {
        // Usually the sync is long done when the headers come (its fsync ran while the upstream
        // opened): then there is nothing to wait for, and `Fiber.join`'s steps are skipped.
        const synced = durable.unsafePoll()
        if (synced === null || !Exit.isSuccess(synced)) {
          yield* Fiber.join(durable).pipe(
            Effect.tapDefect(() =>
              Effect.zipRight(Scope.close(connection, Exit.void), abandon(p, "internal_error", "The gateway could not make the reservation durable; nothing was charged.", served.attempts))
            ),
            // Shutdown while it waits: the upstream connection closes here (the hold is voided by `handle`).
            Effect.onInterrupt(() => Scope.close(connection, Exit.void))
          )
        }
        timeline.mark("reservation on disk (after the upstream opened)")
      }
      // Kept alive by `keepCallsAlive`, and its progress marked by the heartbeat, until its connection closes.
      liveCalls.add(p)
      yield* Scope.addFinalizer(connection, Effect.sync(() => (liveCalls.delete(p), streamMarks.delete(p))))
      const renderer = p.surface.streamRenderer({ includeUsage: p.request.includeUsage, requestId: p.requestId, nowMs: yield* Clock.currentTimeMillis })
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
      const rateCardVersion = p.prices.get(served.route.name)!.version
      let markedLength = 0
      streamMarks.set(p, () => {
        if (settled || delivered.length === markedLength) return undefined
        markedLength = delivered.length
        // Uncached: a stream's prefix never repeats, and caching one per beat would push out the prompts the cache is for.
        const tokens = countedTokens(p.inputTokens, countBounded(delivered))
        return { route: served.route.name, rateCardVersion, tokens, at: 0 }
      })

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

      const concat = (frames: ReadonlyArray<Uint8Array>): Uint8Array => {
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

      /** Settle once, however the stream ends. */
      const finish = (how: "complete" | "cut" | "disconnect", failure?: UpstreamFailure): Effect.Effect<ReadonlyArray<Uint8Array>> =>
        Effect.suspend(() => {
          if (settled) return Effect.succeed([])
          settled = true
          const { tokens, source } = chargedTokens(how === "complete" ? usage : undefined, p.inputTokens, () => countBounded(delivered))
          if (delivered.length === 0 && how !== "complete") {
            const message = failure?.message ?? "the client disconnected before any token was delivered"
            return Effect.as(
              abandon(p, how === "cut" ? "route_unavailable" : "client_disconnected", message, served.attempts),
              renderer.broken(`The upstream stream failed before any token: ${message}. Nothing was charged.`, undefined)
            )
          }
          let tail: ReadonlyArray<Uint8Array> = []
          return settle(
            p,
            principal,
            served,
            tokens,
            source,
            schemaOk && how === "complete",
            (g) => {
              tail =
                how === "complete"
                  ? renderer.complete(g, tokens)
                  : renderer.broken(`The upstream stream broke: ${failure?.message ?? "client disconnected"}. Delivered tokens were charged.`, g)
              return { status: 200, contentType: "text/event-stream", body: keep ? concat([...sent, ...tail]) : new Uint8Array() }
            },
            () => tail
          )
        })

      // The per-event path is plain JavaScript over an async iterable: an Effect Stream would cost
      // ≈ 50–100 µs of CPU per element pulled (bench/README.md). Effects run only to settle.
      const run = Runtime.runPromise(yield* Effect.runtime<never>())
      const close = () => run(Effect.zipRight(finish("disconnect"), Scope.close(connection, Exit.void)))
      let started = false
      let cancelled = false
      const cancel = () => {
        if (cancelled) return
        cancelled = true
        // Never iterated: settle here. Iterating: closing the connection ends the upstream read
        // below, which then settles as a disconnect.
        void (started ? run(Scope.close(connection, Exit.void)) : close())
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
      streamCancels.set(p, stop)
      yield* Scope.addFinalizer(connection, Effect.sync(() => streamCancels.delete(p)))
      const frames: AsyncIterable<Uint8Array> = {
        async *[Symbol.asyncIterator]() {
          started = true
          try {
            let ended: "complete" | "cut" = "complete"
            let failure: UpstreamFailure | undefined
            try {
              for await (const batch of served.value) {
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
            const tail = await run(finish(cancelled ? "disconnect" : ended, failure))
            if (tail.length > 0 && !cancelled) yield concat(tail)
          } finally {
            // However the iteration stops (the client went away, the consumer returned): settle once.
            await close()
          }
        }
      }
      return { _tag: "Sse", frames, cancel } satisfies GatewayReply
    })

  return completeStreaming
}
