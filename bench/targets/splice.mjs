/**
 * Bench child: a TCP load balancer in front of several Tollgate instances, in its own process — as an
 * L4 balancer runs on its own machine in a deployment, so its CPU is not the gateway's and it shares
 * no event loop with an instance (docs/decisions/0045). bench/targets/tollgatePg.ts starts it.
 *
 *   node bench/targets/splice.mjs --ports 4001,4002 [--affinity] [--port N]
 *
 * Round robin by connection; with `--affinity`, a connection goes to the instance that owns the key of
 * its first request (keys dealt to the instances in the order they are first seen), as a balancer
 * hashing the key would keep each project's calls on one instance. Prints one JSON line
 * `{"ready":true,"port":N}` once it listens.
 */
import { createConnection, createServer } from "node:net"

const arg = (name) => {
  const i = process.argv.indexOf(name)
  return i === -1 ? undefined : process.argv[i + 1]
}
const ports = (arg("--ports") ?? "").split(",").filter((p) => p !== "").map(Number)
if (ports.length === 0 || ports.some((p) => !Number.isInteger(p) || p <= 0)) {
  console.error("splice.mjs: --ports a,b,... is required")
  process.exit(2)
}
const affinity = process.argv.includes("--affinity")

let next = 0
const owner = new Map()
const pick = (head) => {
  const key = /\r\nauthorization: *Bearer +([^\r\n]+)/i.exec(head)?.[1]
  if (key === undefined) return next++ % ports.length
  let i = owner.get(key)
  if (i === undefined) owner.set(key, (i = owner.size % ports.length))
  return i
}

const join = (client, index, first) => {
  const upstream = createConnection({ host: "127.0.0.1", port: ports[index] })
  upstream.setNoDelay(true)
  if (first !== undefined) upstream.write(first)
  client.pipe(upstream).pipe(client)
  client.on("error", () => upstream.destroy())
  upstream.on("error", () => client.destroy())
}

const server = createServer((client) => {
  client.setNoDelay(true)
  if (!affinity) return join(client, next++ % ports.length)
  let head = Buffer.alloc(0)
  const onData = (chunk) => {
    head = Buffer.concat([head, chunk])
    if (head.indexOf("\r\n\r\n") === -1 && head.length < 16_384) return
    client.off("data", onData)
    client.pause()
    join(client, pick(head.toString("latin1")), head)
    client.resume()
  }
  client.on("data", onData)
  client.on("error", () => client.destroy())
})

server.listen(Number(arg("--port") ?? "0"), "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ ready: true, port: server.address().port }) + "\n")
})
process.once("SIGTERM", () => process.exit(0))
process.once("SIGINT", () => process.exit(0))
