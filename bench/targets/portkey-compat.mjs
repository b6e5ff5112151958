// Preload for the Portkey gateway (1.15.x) on Node: its streaming path builds
// `new Response(stream, upstreamFetchResponse)` and then appends x-portkey-* headers, which throws
// `TypeError: immutable` because @hono/node-server's lightweight Response reuses the fetch
// response's immutable Headers (Portkey-AI/gateway issues 1389 and 1550). Re-wrapping each fetch
// response with a mutable copy of its headers (status, body stream untouched) lets streams work.
// Cost: one Response object and one Headers copy per upstream call.
const NativeResponse = globalThis.Response
const nativeFetch = globalThis.fetch
globalThis.fetch = async (...args) => {
  const res = await nativeFetch(...args)
  return new NativeResponse(res.body, { status: res.status, statusText: res.statusText, headers: new Headers(res.headers) })
}
