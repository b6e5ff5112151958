/**
 * The hot path on raw node:http: `POST /v1/chat/completions` and `POST /v1/responses` are served by a
 * plain request listener that calls the same services as the Effect handlers in src/http/app.ts, and
 * every other request goes to the Effect app unchanged. The Effect HTTP server costs several hundred
 * µs of CPU per request (bench/README.md); here the per-request work is the governed call's own
 * callbacks (a fiber only where a step needs one), headers read straight from IncomingMessage, and
 * one write.
 *
 * What a client sees is the same as through `app`: the same statuses, headers and bodies (errors
 * through src/http/errors.ts, bodies read by src/http/body.ts), the same metric and access log line.
 * As under the Effect server, the governed call itself is not interrupted when the client hangs up
 * (the platform runs a handler uninterruptibly); a stream is cancelled, and the Gateway settles it for
 * what was delivered — also when the client left before the stream's headers (under the Effect server
 * such a request used to stay pending until the recovery sweep).
 */
import type { HttpApp, HttpServerResponse } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Cause, Effect, Either, Exit, Option, Runtime } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { Settings } from "../domain/config.ts"
import { timeline } from "../domain/timeline.ts"
import { type GovernanceError, InvalidApiKey, RouteUnavailable, type TollgateError } from "../domain/errors.ts"
import { storeUnavailableIn } from "../store/storeFaults.ts"
import { Gateway, type GatewayReply, type SseReply } from "../services/Gateway.ts"
import { KeyRegistry, type Principal } from "../services/KeyRegistry.ts"
import { Metrics } from "../services/Metrics.ts"
import { logAccess } from "./app.ts"
import { closeIfUnread, readJsonBody } from "./body.ts"
import { chatCallOf, type GovernedPath, governedNow } from "./governed.ts"
import { errorResponse, internalError, logDefect, wireError } from "./errors.ts"
import { pathOf } from "./path.ts"
import { header } from "./request.ts"

type FastPath = GovernedPath

/** The governed endpoint a request is for, or undefined when the Effect app serves it. */
export const fastPathOf = (req: IncomingMessage): FastPath | undefined => {
  if (req.method !== "POST") return undefined
  const path = pathOf(req.url ?? "")
  return path === "/v1/chat/completions" || path === "/v1/responses" ? path : undefined
}

/** Write a response built for the Effect server (JSON error bodies), as its node handler does. */
const writeResponse = (res: ServerResponse, response: HttpServerResponse.HttpServerResponse): void => {
  if (res.writableEnded) return
  closeIfUnread(res)
  res.writeHead(response.status, response.headers)
  res.end(response.body._tag === "Uint8Array" ? response.body.body : undefined)
}

/** Write a JSON (or replayed) reply with the headers gathered along the pipeline. */
const writeBody = (res: ServerResponse, reply: Extract<GatewayReply, { _tag: "Body" }>, headers: Record<string, string>): void => {
  if (res.writableEnded) return
  const length = typeof reply.body === "string" ? Buffer.byteLength(reply.body) : reply.body.byteLength
  // The call's own headers object, written once: set in place rather than copied.
  headers["content-type"] = reply.contentType
  if (length > 0) headers["content-length"] = String(length)
  closeIfUnread(res)
  res.writeHead(reply.status, headers)
  res.end(reply.body)
}

/** Resolve once the response can take more bytes, or is gone. */
const drainedOrClosed = (res: ServerResponse) =>
  new Promise<void>((resolve) => {
    const done = () => {
      res.off("drain", done)
      res.off("close", done)
      resolve()
    }
    res.on("drain", done)
    res.on("close", done)
  })

/**
 * Write a streamed reply's frames, waiting for 'drain' when the socket buffer is full. A client that
 * hangs up cancels the reply (the Gateway stops reading the upstream and settles for what was
 * delivered); the frames are then read to their end unwritten, so the settlement completes.
 */
const pipeFrames = async (reply: SseReply, res: ServerResponse): Promise<void> => {
  const hangUp = () => {
    if (!res.writableEnded) reply.cancel()
  }
  if (res.destroyed) hangUp()
  else res.once("close", hangUp)
  let first = true
  try {
    for await (const frame of reply.frames) {
      if (res.destroyed) continue
      const flowing = res.write(frame)
      if (first) timeline.mark("stream: first frame written")
      first = false
      if (!flowing) await drainedOrClosed(res)
    }
  } finally {
    if (!res.writableEnded) res.end()
    timeline.end("stream: the rest, settled")
  }
}

/** One request on the fast path: what its answer and its metric line need. */
interface FastCall {
  readonly req: IncomingMessage
  readonly res: ServerResponse
  readonly path: FastPath
  readonly start: number
  /** The reply's headers, gathered along the pipeline (request id, rate limit). */
  readonly headers: Record<string, string>
  caller: Principal | undefined
}

/**
 * The fast-path handler, built once at server start with the services and a Runtime captured there
 * (the logger and tracer settings of ServerLive included).
 *
 * The synchronous prefix of a call runs as plain functions, before any fiber: a cached key is
 * checked (KeyRegistry.authenticateCached) and the body read with a callback, so a refused key costs
 * no fiber and an admitted call's fiber starts with its body in hand, one suspension fewer. A key not
 * in the cache is read from the store inside the fiber, as before.
 */
export const makeFastHandler = Effect.gen(function* () {
  const settings = yield* Settings
  const metrics = yield* Metrics
  const keys = yield* KeyRegistry
  const gateway = yield* Gateway
  const clock = yield* Effect.clock
  const runtime = yield* Effect.runtime<never>()
  const runFork = Runtime.runFork(runtime)

  const readJson = (req: IncomingMessage) =>
    Effect.async<unknown, GovernanceError>((resume) =>
      readJsonBody(req, settings, (r) => resume(r.ok ? Effect.succeed(r.value) : Effect.fail(r.error)))
    )

  const record = (c: FastCall, status: number, requestId: string | undefined) => {
    const seconds = (performance.now() - c.start) / 1000
    metrics.request(c.path, status, seconds)
    if (settings.accessLog) logAccess("POST", c.path, status, seconds, requestId, c.caller)
  }

  /** Write a stream's head and pipe its frames: delivered (its upstream just opened) or at the call's end. */
  const stream = (c: FastCall, reply: SseReply): void => {
    const { res, headers } = c
    record(c, 200, headers["x-request-id"])
    headers["cache-control"] = "no-cache"
    headers["x-accel-buffering"] = "no"
    headers["content-type"] = "text/event-stream"
    res.writeHead(200, headers)
    timeline.mark("stream: headers written")
    pipeFrames(reply, res).catch((error: unknown) => runFork(logDefect(Cause.die(error))))
  }

  /** `ChatCall.deliver`: the call's answer, told once (src/services/gateway/inflight.ts). Never throws: `settle` does not. */
  const deliverTo =
    (c: FastCall) =>
    (answer: Exit.Exit<GatewayReply, GovernanceError>): void => {
      timeline.mark("the call is answered")
      settle(c, answer)
    }

  const respond = (c: FastCall, exit: Exit.Exit<GatewayReply, GovernanceError>): void => {
    const { res, headers } = c
    if (Exit.isSuccess(exit)) {
      const reply = exit.value
      if (reply._tag === "Body") {
        record(c, reply.status, headers["x-request-id"])
        writeBody(res, reply, headers)
        return timeline.end("write the response")
      }
      return stream(c, reply)
    }
    const failure = Cause.failureOption(exit.cause)
    if (Option.isSome(failure)) return fail(c, failure.value)
    if (Cause.isInterruptedOnly(exit.cause)) {
      // Only a shutting-down gateway interrupts the call (its hold was voided): an OpenAI-shaped 503.
      if (res.headersSent) return void res.end()
      return fail(c, shuttingDown)
    }
    // The database refused or dropped the call's connection (src/store/storeFaults.ts): 503, not 500.
    const unavailable = storeUnavailableIn(exit.cause)
    if (unavailable !== undefined) return fail(c, unavailable)
    runFork(logDefect(exit.cause))
    record(c, internalError.status, internalError.headers["x-request-id"])
    writeResponse(res, internalError)
  }

  /** Answer a typed failure as its OpenAI error body, with the headers gathered so far. */
  const fail = (c: FastCall, error: TollgateError): void => {
    const response = errorResponse(wireError(error), c.headers)
    record(c, response.status, response.headers["x-request-id"])
    writeResponse(c.res, response)
  }

  /** Writing an answer failed (a header node rejects, say): a defect of ours, answered 500 while the head is unsent. */
  const writeFailed = (c: FastCall, error: unknown): void => {
    runFork(logDefect(Cause.die(error)))
    if (!c.res.headersSent) writeResponse(c.res, internalError)
    else c.res.destroy()
  }

  /**
   * Answer, and never throw: a write that fails is a defect of ours, not a crash of the process. A
   * stream whose head could not be written is cancelled, so its hold is resolved.
   */
  const settle = (c: FastCall, exit: Exit.Exit<GatewayReply, GovernanceError>): void => {
    try {
      respond(c, exit)
    } catch (error) {
      writeFailed(c, error)
      if (Exit.isSuccess(exit) && exit.value._tag === "Sse") exit.value.cancel()
    }
  }

  /**
   * The governed call, taken by the Gateway (Gateway.begin): no client hang-up stops it, shutdown
   * does (and voids its hold); its answer comes through `deliver`. Called from a body's 'end' or a
   * fiber's observer: a throw of ours is answered here as a defect.
   */
  const governed = (c: FastCall, principal: Principal, clientBody: unknown): void => {
    try {
      const governedCall = governedNow[c.path](clientBody)
      if (Either.isLeft(governedCall)) return settle(c, Exit.fail(governedCall.left))
      gateway.begin(chatCallOf(principal, governedCall.right.surface, governedCall.right.body, clientBody, c.req, c.headers, deliverTo(c)), runtime, clock)
    } catch (error) {
      settle(c, Exit.die(error))
    }
  }

  /** The call's first steps, up to the Gateway. */
  const enter = (c: FastCall): void => {
    const now = clock.unsafeCurrentTimeMillis()
    const verdict = keys.authenticateCached(header(c.req, "authorization"), now)
    if (verdict instanceof InvalidApiKey) return settle(c, Exit.fail(verdict))
    if ("miss" in verdict) {
      // A key not in the cache is read from the store, in a fiber the Gateway owns (shutdown stops
      // it); the header is parsed once: the miss carries the parsed key to the store's lookup.
      const prefix = Effect.flatMap(keys.authenticateMiss(verdict.miss, now), (principal) => {
        c.caller = principal
        timeline.mark("auth")
        return Effect.map(readJson(c.req), (clientBody) => (timeline.mark("read + parse body"), [principal, clientBody] as const))
      })
      const fiber = runFork(prefix)
      gateway.adopt(fiber)
      fiber.addObserver((exit) => (Exit.isSuccess(exit) ? governed(c, exit.value[0], exit.value[1]) : settle(c, Exit.failCause(exit.cause))))
      return
    }
    c.caller = verdict
    timeline.mark("auth")
    readJsonBody(c.req, settings, (body) => {
      if (!body.ok) return settle(c, Exit.fail(body.error))
      timeline.mark("read + parse body")
      governed(c, verdict, body.value)
    })
  }

  return (req: IncomingMessage, res: ServerResponse, path: FastPath): void => {
    const c: FastCall = { req, res, path, start: performance.now(), headers: {}, caller: undefined }
    timeline.begin()
    try {
      enter(c)
    } catch (error) {
      // A throw of the plain steps is a defect of ours (logged, 500), as it was inside the fiber.
      settle(c, Exit.die(error))
    }
  }
})

const shuttingDown = new RouteUnavailable({
  message: "The gateway shut down before this request finished; nothing was charged. Retry it (with the same idempotency key, if any).",
  retryable: true
})

/**
 * The server's one 'request' listener: the governed endpoints on the fast path, everything else on
 * the Effect `app` through the platform's own node handler (routes, errors, metrics, access log).
 */
export const makeRequestListener = <E, R>(app: HttpApp.Default<E, R>) =>
  Effect.gen(function* () {
    const effectHandler = yield* NodeHttpServer.makeHandler(app)
    const fast = yield* makeFastHandler
    return (req: IncomingMessage, res: ServerResponse): void => {
      const path = fastPathOf(req)
      if (path !== undefined) return fast(req, res, path)
      // The Effect server writes the head itself: a request with a body it answers before reading it
      // to the end (401 on the admin API, 413) gets `Connection: close` there too.
      if (!req.complete) {
        const writeHead = res.writeHead
        res.writeHead = function (this: ServerResponse, ...args: Parameters<ServerResponse["writeHead"]>) {
          closeIfUnread(this)
          return writeHead.apply(this, args)
        } as ServerResponse["writeHead"]
      }
      effectHandler(req, res)
    }
  })
