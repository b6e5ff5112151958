/**
 * Where a webhook may be sent (issue 42, DESIGN §10): no server-side request forgery into the
 * operator's network. An endpoint URL must be https; http, and any address that is loopback,
 * private, link-local, unique-local, shared (CGNAT), multicast, reserved or unspecified, only with
 * TOLLGATE_WEBHOOK_ALLOW_PRIVATE=1. At registration the URL is checked as written (an IP literal,
 * `localhost`); at delivery the host name is resolved, EVERY address it resolves to checked, and the
 * connection made to the checked address itself (the socket's lookup answers it), so a DNS answer
 * that changes between check and connect cannot redirect the request (no rebinding window).
 */
import { lookup } from "node:dns/promises"
import { BlockList, isIP } from "node:net"

const blocked = new BlockList()
for (const [net, prefix] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.0.2.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["198.51.100.0", 24],
  ["203.0.113.0", 24],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4]
] as const) blocked.addSubnet(net, prefix, "ipv4")
for (const [net, prefix] of [
  ["::", 128],
  ["::1", 128],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8],
  ["2001:db8::", 32],
  ["100::", 64]
] as const) blocked.addSubnet(net, prefix, "ipv6")

/** An IPv4 address an IPv6 one carries (mapped ::ffff:a.b.c.d, NAT64 64:ff9b::/96), checked as IPv4. */
const embeddedIpv4 = (address: string): string | undefined => {
  const m = /^(?:::ffff:|64:ff9b::)(\d+\.\d+\.\d+\.\d+)$/i.exec(address)
  if (m !== null) return m[1]
  const hex = /^(?:::ffff:|64:ff9b::)([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(address)
  if (hex === null) return undefined
  const hi = parseInt(hex[1]!, 16)
  const lo = parseInt(hex[2]!, 16)
  return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`
}

/** Whether `address` (an IP literal) is one only TOLLGATE_WEBHOOK_ALLOW_PRIVATE=1 may reach. */
export const isPrivateAddress = (address: string): boolean => {
  const family = isIP(address)
  if (family === 4) return blocked.check(address, "ipv4")
  if (family === 6) {
    const v4 = embeddedIpv4(address)
    return v4 !== undefined ? blocked.check(v4, "ipv4") : blocked.check(address, "ipv6")
  }
  return true
}

/** A URL's host without IPv6 brackets. */
const hostOf = (url: URL): string => url.hostname.replace(/^\[(.*)\]$/, "$1")

const isLocalName = (host: string): boolean => host === "localhost" || host.endsWith(".localhost")

/** The registration check: the URL, or why not (a message naming `url`). At most 2048 characters. */
export const checkEndpointUrl = (raw: string, allowPrivate: boolean): URL | string => {
  if (raw.length > 2048) return "url must be at most 2048 characters."
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return "url must be an absolute https URL."
  }
  if (url.username !== "" || url.password !== "") return "url must not carry credentials."
  if (url.protocol !== "https:" && !(url.protocol === "http:" && allowPrivate)) {
    return allowPrivate ? "url must be an http or https URL." : "url must be https (http only with TOLLGATE_WEBHOOK_ALLOW_PRIVATE=1)."
  }
  const host = hostOf(url)
  if (!allowPrivate && ((isIP(host) !== 0 && isPrivateAddress(host)) || isLocalName(host))) {
    return `url's host ${host} is a loopback, private or link-local address; such endpoints need TOLLGATE_WEBHOOK_ALLOW_PRIVATE=1.`
  }
  return url
}

/** Where a delivery connects: the one address checked, or why it may not be sent. */
export type Destination = { readonly address: string; readonly family: 4 | 6 } | { readonly refused: string }

/** Resolve `url`'s host and check every address (an IP literal is checked as it is). */
export const resolveDestination = async (url: URL, allowPrivate: boolean): Promise<Destination> => {
  const host = hostOf(url)
  let addresses: Array<{ address: string; family: number }>
  if (isIP(host) !== 0) addresses = [{ address: host, family: isIP(host) }]
  else {
    try {
      addresses = await lookup(host, { all: true, verbatim: true })
    } catch {
      return { refused: `could not resolve ${host}` }
    }
  }
  if (addresses.length === 0) return { refused: `could not resolve ${host}` }
  if (!allowPrivate) {
    const bad = addresses.find((a) => isPrivateAddress(a.address))
    if (bad !== undefined) return { refused: `${host} resolves to ${bad.address}, a loopback, private or link-local address (TOLLGATE_WEBHOOK_ALLOW_PRIVATE is off)` }
  }
  const first = addresses[0]!
  return { address: first.address, family: first.family === 6 ? 6 : 4 }
}
