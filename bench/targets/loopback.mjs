// Preload for third-party servers that listen on every interface: force listen() onto 127.0.0.1,
// so the benchmark never exposes anything beyond loopback.
import net from "node:net"

const listen = net.Server.prototype.listen
net.Server.prototype.listen = function (...args) {
  const first = args[0]
  if (typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first))) {
    // listen(port[, host][, backlog][, cb]): replace or insert the host.
    const rest = args.slice(1)
    if (typeof rest[0] === "string" || rest[0] === undefined) rest[0] = "127.0.0.1"
    else rest.unshift("127.0.0.1")
    return listen.call(this, Number(first), ...rest)
  }
  if (first !== null && typeof first === "object" && !Array.isArray(first) && first.path === undefined) {
    return listen.call(this, { ...first, host: "127.0.0.1" }, ...args.slice(1))
  }
  return listen.apply(this, args)
}
