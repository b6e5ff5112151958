/**
 * Bench child (optional target `effect`): the floor for anything built on Effect 3's HTTP stack — an
 * HttpRouter route that forwards the body to the upstream with NodeHttpClient.layerUndici and
 * returns the upstream's bytes, no governance, tracer off. Tollgate's cost above this line is its own.
 * Prints one JSON line `{"ready":true,"port":N}` when listening.
 */
import { HttpClient, HttpClientRequest, HttpRouter, HttpServer, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpClient, NodeHttpServer } from "@effect/platform-node"
import { Effect, Layer, ManagedRuntime } from "effect"
import { createServer } from "node:http"
import { arg } from "../lib/args.ts"

const upstream = (arg("--upstream") ?? "http://127.0.0.1:9100").replace(/\/+$/, "")

const forward = Effect.gen(function* () {
  const req = yield* HttpServerRequest.HttpServerRequest
  const client = yield* HttpClient.HttpClient
  const body = yield* req.text
  const res = yield* client.execute(
    HttpClientRequest.post(`${upstream}/v1/chat/completions`).pipe(HttpClientRequest.bodyText(body, "application/json"))
  )
  const isStream = (res.headers["content-type"] ?? "").startsWith("text/event-stream")
  return isStream
    ? HttpServerResponse.stream(res.stream, { status: res.status, contentType: "text/event-stream" })
    : HttpServerResponse.uint8Array(new Uint8Array(yield* res.arrayBuffer), { status: res.status, contentType: "application/json" })
}).pipe(Effect.orDie)

const app = HttpRouter.empty.pipe(HttpRouter.post("/v1/chat/completions", forward))
const ServerLive = HttpServer.serve(app).pipe(
  Layer.provideMerge(NodeHttpServer.layer(createServer, { port: Number(arg("--port") ?? "0"), host: "127.0.0.1" })),
  Layer.provide(NodeHttpClient.layerUndici),
  Layer.provide(Layer.setTracerEnabled(false))
)
const runtime = ManagedRuntime.make(ServerLive)
const port = await runtime.runPromise(Effect.map(HttpServer.HttpServer, (s) => (s.address._tag === "TcpAddress" ? s.address.port : 0)))
process.stdout.write(JSON.stringify({ ready: true, port }) + "\n")
const stop = () => void runtime.dispose().finally(() => process.exit(0))
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
