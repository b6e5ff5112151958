/**
 * Issue 38, finding 3 (and the X-Forwarded-Proto line of finding 7): anyone with a project key could
 * sign every operator out (one global cap of 10,000 sessions, oldest first), and sign-in and the
 * bearer admin token had no throttle. Now sessions are bounded per principal, with the operator
 * outside the team budget; failed sign-ins and admin-token checks are throttled per client address
 * and per credential (429 rate_limited with Retry-After, before the credential is checked), counted
 * in /metrics; and the client's address and scheme are believed from trusted proxies only.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Option, Redacted, TestClock } from "effect"
import { afterAll, beforeAll } from "vitest"
import { formatKey, parseKey } from "../../src/domain/apiKey.ts"
import { AUTH_LIMITS, addressBucket, AuthThrottle } from "../../src/services/AuthThrottle.ts"
import { Metrics } from "../../src/services/Metrics.ts"
import { type Session, SessionTable, type Viewer } from "../../src/services/Sessions.ts"
import { ADMIN_TOKEN, useMockedGateway } from "../support/gateway.ts"

interface Reply {
  readonly status: number
  readonly body: any
  readonly headers: Headers
}

/** POST /admin/v1/session from `address` (X-Forwarded-For, believed from a loopback peer by default). */
const signIn = async (origin: string, token: string, headers: Record<string, string> = {}): Promise<Reply> => {
  const res = await fetch(`${origin}/admin/v1/session`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify({ token }) })
  return { status: res.status, body: await res.json(), headers: res.headers }
}

const from = (address: string) => ({ "x-forwarded-for": address })

const cookieOf = (r: Reply) => r.headers.get("set-cookie")!.split(";")[0]!

const get = async (origin: string, path: string, headers: Record<string, string>): Promise<Reply> => {
  const res = await fetch(`${origin}${path}`, { headers })
  return { status: res.status, body: await res.json(), headers: res.headers }
}

/** Run `n` calls, `width` at a time. */
const pool = async <A>(n: number, width: number, call: (i: number) => Promise<A>): Promise<Array<A>> => {
  const out = new Array<A>(n)
  let next = 0
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < n) {
      const i = next++
      out[i] = await call(i)
    }
  }))
  return out
}

const scrape = async (origin: string, token = ADMIN_TOKEN) => (await fetch(`${origin}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text()

const expectRateLimited = (r: Reply) => {
  expect(r.status).toBe(429)
  expect(r.body.error).toMatchObject({ type: "rate_limit_error", code: "rate_limited", param: null })
  expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
  expect(r.headers.get("set-cookie")).toBeNull()
}

describe("sessions are bounded per principal: no team sign-in signs the operator out", () => {
  const env = useMockedGateway({ beforeAll, afterAll })

  it("10,050 team sign-ins with one project key leave the operator's session working; the key keeps its 20 newest", { timeout: 180_000 }, async () => {
    const origin = env.gateway.origin
    const operator = await signIn(origin, ADMIN_TOKEN)
    expect(operator.status).toBe(201)
    const first = await signIn(origin, env.gateway.devKey)
    const started = performance.now()
    const statuses = await pool(10_050, 16, async (i) => (await signIn(origin, env.gateway.devKey, from(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`))).status)
    const floodMs = performance.now() - started
    expect(new Set(statuses)).toEqual(new Set([201]))
    const stillIn = await get(origin, "/admin/v1/session", { cookie: cookieOf(operator) })
    console.log(`[finding 3] 10,050 team sign-ins in ${(floodMs / 1000).toFixed(1)} s (${Math.round(10_050 / (floodMs / 1000))}/s); the operator's session afterwards: ${stillIn.status} ${stillIn.body.role}`)
    expect([stillIn.status, stillIn.body.role]).toEqual([200, "operator"])
    // The flooding key itself kept only its newest sessions: its first one is gone.
    expect((await get(origin, "/admin/v1/session", { cookie: cookieOf(first) })).status).toBe(401)
  })

  it("the operator keeps its 20 newest sessions: a 21st sign-in ends the oldest", async () => {
    const origin = env.gateway.origin
    const sessions = []
    for (let i = 0; i < 21; i++) sessions.push(await signIn(origin, ADMIN_TOKEN))
    expect((await get(origin, "/admin/v1/session", { cookie: cookieOf(sessions[0]!) })).status).toBe(401)
    for (const s of sessions.slice(1)) expect((await get(origin, "/admin/v1/session", { cookie: cookieOf(s) })).status).toBe(200)
  })
})

describe("SessionTable: the bounds, on a small table", () => {
  const operator: Viewer = { role: "operator" }
  const team = (keyId: string): Viewer => ({ role: "team", projectId: "prj_a", environment: "development", keyId })
  const session = (viewer: Viewer, at: number, ttl = 1_000): Session => ({ viewer, csrfToken: "c", createdAt: at, expiresAt: at + ttl })

  it("a full team budget pushes out the oldest TEAM session, never the operator's", () => {
    const table = new SessionTable({ perPrincipal: 2, teamSessions: 3 })
    table.add("op", session(operator, 0), 0)
    for (let i = 0; i < 100; i++) table.add(`t${i}`, session(team(`key_${i}`), 0), 0)
    expect(table.get("op")).toBeDefined()
    expect(table.size).toEqual({ operator: 1, team: 3, principals: 4 })
    expect(["t97", "t98", "t99"].every((k) => table.get(k) !== undefined)).toBe(true)
  })

  it("a principal keeps its newest `perPrincipal`; another principal's sessions stay", () => {
    const table = new SessionTable({ perPrincipal: 2, teamSessions: 10 })
    table.add("a1", session(team("key_a"), 0), 0)
    table.add("b1", session(team("key_b"), 0), 0)
    for (const k of ["a2", "a3", "a4"]) table.add(k, session(team("key_a"), 0), 0)
    expect(["a1", "a2"].map((k) => table.get(k))).toEqual([undefined, undefined])
    expect(["a3", "a4", "b1"].every((k) => table.get(k) !== undefined)).toBe(true)
    table.add("o1", session(operator, 0), 0)
    table.add("o2", session(operator, 0), 0)
    table.add("o3", session(operator, 0), 0)
    expect(table.get("o1")).toBeUndefined()
    expect(table.size).toEqual({ operator: 2, team: 3, principals: 3 })
  })

  it("expired sessions are swept at the next sign-in; a deleted one frees its principal", () => {
    const table = new SessionTable({ perPrincipal: 2, teamSessions: 10 })
    table.add("old", session(team("key_a"), 0, 100), 0)
    table.add("op", session(operator, 0, 100), 0)
    table.add("new", session(team("key_b"), 200, 100), 200)
    expect(table.size).toEqual({ operator: 0, team: 1, principals: 1 })
    expect(table.delete("new")).toBe(true)
    expect(table.delete("new")).toBe(false)
    expect(table.size).toEqual({ operator: 0, team: 0, principals: 0 })
  })
})

describe("failed sign-ins and admin-token checks are throttled per address and per credential", () => {
  const env = useMockedGateway({ beforeAll, afterAll })

  it("wrong admin tokens from one address: 10 answered 401, then 429 with Retry-After, even for the right token; the right token from another address signs in", async () => {
    const origin = env.gateway.origin
    const attacker = from("203.0.113.7")
    const answers = []
    for (let i = 0; i < 12; i++) answers.push(await signIn(origin, `wrong-${i}`, attacker))
    expect(answers.map((r) => r.status)).toEqual([...Array(10).fill(401), 429, 429])
    expectRateLimited(answers[10]!)
    expect(Number(answers[10]!.headers.get("retry-after"))).toBeLessThanOrEqual(6)
    // No oracle: once throttled, the right token is not even checked.
    expectRateLimited(await signIn(origin, ADMIN_TOKEN, attacker))
    // Another address (IPv6: another /64) is not throttled, and a success does not count.
    for (let i = 0; i < 15; i++) expect((await signIn(origin, ADMIN_TOKEN, from("2001:db8:1:2::9"))).status).toBe(201)
    expect((await signIn(origin, "wrong", from("2001:db8:1:3::9"))).status).toBe(401)
    // The same /64 is one address.
    const sameSubnet = []
    for (let i = 0; i < 11; i++) sameSubnet.push((await signIn(origin, "wrong", from(`2001:db8:1:4::${i + 1}`))).status)
    expect(sameSubnet).toEqual([...Array(10).fill(401), 429])
  })

  it("the bearer admin token on /admin/*: the same per-address throttle; no Authorization header is not a guess", async () => {
    const origin = env.gateway.origin
    const statuses = []
    for (let i = 0; i < 11; i++) statuses.push((await get(origin, `/admin/v1/projects/${env.gateway.projectId}`, { authorization: `Bearer wrong-${i}`, ...from("198.51.100.20") })).status)
    expect(statuses).toEqual([...Array(10).fill(401), 429])
    const throttled = await get(origin, `/admin/v1/projects/${env.gateway.projectId}`, { authorization: `Bearer ${ADMIN_TOKEN}`, ...from("198.51.100.20") })
    expectRateLimited(throttled)
    expect(throttled.headers.get("cache-control")).toBe("no-store")
    expect((await get(origin, `/admin/v1/projects/${env.gateway.projectId}`, { authorization: `Bearer ${ADMIN_TOKEN}`, ...from("198.51.100.21") })).status).toBe(200)
    for (let i = 0; i < 12; i++) expect((await get(origin, `/admin/v1/projects/${env.gateway.projectId}`, from("198.51.100.22"))).status).toBe(401)
  })

  it("wrong secrets for one project key id, from any number of addresses: 10 answered 401, then 429 for that key id only", async () => {
    const origin = env.gateway.origin
    const dev = env.gateway.devKey
    const staging = (await env.gateway.admin("POST", `/admin/v1/projects/${env.gateway.projectId}/keys`, { environment: "staging" })).body.secret as string
    // Same id and checksum-valid shape, wrong secret: tg_dev_<id>_<secret><crc>.
    const keyId = parseKey(dev)!.keyId
    const guesses = Array.from({ length: 11 }, (_, i) => formatKey(keyId, "development", String.fromCharCode(98 + i).repeat(32)))
    expect(guesses.every((g) => parseKey(g)?.keyId === keyId)).toBe(true)
    const statuses = []
    for (const [i, guess] of guesses.entries()) statuses.push((await signIn(origin, guess, from(`192.0.2.${i + 1}`))).status)
    expect(statuses).toEqual([...Array(10).fill(401), 429])
    expectRateLimited(await signIn(origin, dev, from("192.0.2.100")))
    expect((await signIn(origin, staging, from("192.0.2.101"))).status).toBe(201)
  })

  it("/metrics counts the failures and the refusals by surface", async () => {
    const text = await scrape(env.gateway.origin)
    const value = (series: string) => Number(new RegExp(`^${series.replace(/[{}]/g, "\\$&")} (\\d+)$`, "m").exec(text)?.[1] ?? NaN)
    expect(value(`tollgate_auth_failures_total{surface="sign_in"}`)).toBe(10 + 1 + 10 + 10)
    expect(value(`tollgate_auth_failures_total{surface="admin_token"}`)).toBe(10)
    expect(value(`tollgate_auth_throttled_total{surface="sign_in",limit="address"}`)).toBe(2 + 1 + 1)
    expect(value(`tollgate_auth_throttled_total{surface="sign_in",limit="project_key"}`)).toBe(2)
    expect(value(`tollgate_auth_throttled_total{surface="admin_token",limit="address"}`)).toBe(2)
  })

  it("the OpenAPI document lists the 429 on sign-in and on the admin endpoints", async () => {
    const doc: any = await (await fetch(`${env.gateway.origin}/openapi.json`)).json()
    expect(Object.keys(doc.paths["/admin/v1/session"].post.responses)).toContain("429")
    expect(Object.keys(doc.paths["/admin/v1/projects/{id}"].get.responses)).toContain("429")
  })

  it("2,000 wrong admin tokens fired at once from one address: 10 get an answer from the check, the rest 429", { timeout: 60_000 }, async () => {
    const started = performance.now()
    const statuses = await pool(2_000, 16, async (i) => (await signIn(env.gateway.origin, `guess-${i}`, from("203.0.113.99"))).status)
    const seconds = (performance.now() - started) / 1000
    const count = (s: number) => statuses.filter((x) => x === s).length
    console.log(`[finding 3] 2,000 wrong admin tokens from one address in ${seconds.toFixed(2)} s: ${count(401)} × 401, ${count(429)} × 429 (${Math.round(2_000 / seconds)}/s answered)`)
    expect(count(401) + count(429)).toBe(2_000)
    // 10 at once, then one per 6 s while the flood lasts.
    expect(count(401)).toBeLessThanOrEqual(10 + Math.ceil(seconds / 6))
  })

  it("GET /metrics: a wrong bearer token is a guess at the admin token, throttled the same (10 answered 401, then 429 even for the right token)", async () => {
    const origin = env.gateway.origin
    const statuses = []
    for (let i = 0; i < 11; i++) statuses.push((await get(origin, "/metrics", { authorization: `Bearer wrong-${i}`, ...from("198.51.100.40") })).status)
    expect(statuses).toEqual([...Array(10).fill(401), 429])
    expectRateLimited(await get(origin, "/metrics", { authorization: `Bearer ${ADMIN_TOKEN}`, ...from("198.51.100.40") }))
    expect((await fetch(`${origin}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...from("198.51.100.41") } })).status).toBe(200)
  })
})

describe("the admin token's bucket is shared by every address", () => {
  // The scraper's own token: /metrics read with the admin token is throttled with the admin token's guesses.
  const env = useMockedGateway({ beforeAll, afterAll }, undefined, { metricsToken: Option.some(Redacted.make("scraper-token")) })

  it("60 failures spread over addresses close it to a 61st address; a signed-in operator's cookie still works", async () => {
    const origin = env.gateway.origin
    const operator = await signIn(origin, ADMIN_TOKEN, from("198.18.0.1"))
    expect(operator.status).toBe(201)
    const spread = await pool(60, 6, async (i) => (await signIn(origin, `guess-${i}`, from(`198.18.1.${Math.floor(i / 10) + 1}`))).status)
    expect(spread.every((s) => s === 401)).toBe(true)
    // The bucket refills one a second: fresh addresses get at most a refill's worth of 401s, then 429.
    let refused: Reply | undefined
    for (let i = 1; refused === undefined && i <= 5; i++) {
      const r = await signIn(origin, `guess-more-${i}`, from(`198.18.2.${i}`))
      if (r.status === 429) refused = r
      else expect(r.status).toBe(401)
    }
    expectRateLimited(refused!)
    // The right token is refused too while the bucket is empty (checked only when the refill is not due within the call).
    if (Number(refused!.headers.get("retry-after-ms")) > 100) {
      expectRateLimited(await get(origin, `/admin/v1/projects/${env.gateway.projectId}`, { authorization: `Bearer ${ADMIN_TOKEN}`, ...from("198.18.3.1") }))
    }
    expect((await get(origin, `/admin/v1/projects/${env.gateway.projectId}`, { cookie: cookieOf(operator) })).status).toBe(200)
    // A project key is another credential: a team still signs in.
    expect((await signIn(origin, env.gateway.devKey, from("198.18.2.3"))).status).toBe(201)
    expect(await scrape(origin, "scraper-token")).toMatch(/^tollgate_auth_throttled_total\{surface="sign_in",limit="admin_token"\} 1$/m)
  })
})

describe("the client's address and scheme come from trusted proxies only", () => {
  const loopback = useMockedGateway({ beforeAll, afterAll })
  const direct = useMockedGateway({ beforeAll, afterAll }, undefined, { trustedProxies: [] })

  it("X-Forwarded-Proto from a trusted proxy: Secure when any hop says https (`https, http` included)", async () => {
    const secure = async (origin: string, proto: string | undefined) => {
      const r = await signIn(origin, ADMIN_TOKEN, proto === undefined ? {} : { "x-forwarded-proto": proto })
      expect(r.status).toBe(201)
      return /;\s*Secure/i.test(r.headers.get("set-cookie")!)
    }
    expect(await secure(loopback.gateway.origin, "https, http")).toBe(true)
    expect(await secure(loopback.gateway.origin, "HTTPS")).toBe(true)
    expect(await secure(loopback.gateway.origin, "http")).toBe(false)
    expect(await secure(loopback.gateway.origin, undefined)).toBe(false)
    // The peer is not a trusted proxy: its X-Forwarded-Proto is not believed (the socket is plain HTTP).
    expect(await secure(direct.gateway.origin, "https")).toBe(false)
  })

  it("X-Forwarded-For from an untrusted peer is ignored: changing it does not escape the throttle", async () => {
    const statuses = []
    for (let i = 0; i < 11; i++) statuses.push((await signIn(direct.gateway.origin, "wrong", from(`203.0.113.${i + 1}`))).status)
    expect(statuses).toEqual([...Array(10).fill(401), 429])
  })

  it("X-Forwarded-For through a trusted proxy: read from the right, so a client's own prefix does not escape the throttle", async () => {
    const statuses = []
    for (let i = 0; i < 11; i++) statuses.push((await signIn(loopback.gateway.origin, "wrong", from(`198.51.100.${i + 1}, 203.0.113.50`))).status)
    expect(statuses).toEqual([...Array(10).fill(401), 429])
    // Trusted hops are skipped: the client is the first untrusted address from the right.
    expect((await signIn(loopback.gateway.origin, "wrong", from("203.0.113.50, 127.0.0.1"))).status).toBe(429)
    expect((await signIn(loopback.gateway.origin, "wrong", from("203.0.113.51, 127.0.0.1"))).status).toBe(401)
    // Not an address: the walk stops at the proxy that passed it on (here the loopback peer itself).
    expect((await signIn(loopback.gateway.origin, "wrong", from("not-an-ip"))).status).toBe(401)
  })
})

describe("AuthThrottle on Effect's clock", () => {
  const layer = AuthThrottle.Default.pipe(Layer.provide(Metrics.Default))
  const fail = Effect.fail("wrong" as const)
  const admin = { surface: "admin_token", credential: { kind: "admin_token" } } as const

  it.effect("after the burst, one failure per emission interval; Retry-After says when", () =>
    Effect.gen(function* () {
      const throttle = yield* AuthThrottle
      const at = { ...admin, address: "192.0.2.1" }
      for (let i = 0; i < AUTH_LIMITS.address.burst; i++) expect(yield* Effect.flip(throttle.guard(at, fail))).toBe("wrong")
      const refused = yield* Effect.flip(throttle.guard(at, fail))
      expect(refused).toMatchObject({ _tag: "RateLimited", retryAfterMs: 6_000 })
      yield* TestClock.adjust("5999 millis")
      expect(yield* Effect.flip(throttle.guard(at, fail))).toMatchObject({ _tag: "RateLimited", retryAfterMs: 1 })
      yield* TestClock.adjust("1 millis")
      expect(yield* Effect.flip(throttle.guard(at, fail))).toBe("wrong")
      expect(yield* Effect.flip(throttle.guard(at, Effect.succeed("right")))).toMatchObject({ _tag: "RateLimited" })
    }).pipe(Effect.provide(layer))
  )

  it.effect("successes give their token back: any number of them leaves the whole burst for failures", () =>
    Effect.gen(function* () {
      const throttle = yield* AuthThrottle
      const at = { ...admin, address: "192.0.2.2" }
      for (let i = 0; i < 100; i++) expect(yield* throttle.guard(at, Effect.succeed("ok"))).toBe("ok")
      for (let i = 0; i < AUTH_LIMITS.address.burst; i++) expect(yield* Effect.flip(throttle.guard(at, fail))).toBe("wrong")
      expect(yield* Effect.flip(throttle.guard(at, fail))).toMatchObject({ _tag: "RateLimited" })
    }).pipe(Effect.provide(layer))
  )

  it.effect("memory is bounded: 10,050 failing addresses and key ids leave at most 10,000 of each tracked", () =>
    Effect.gen(function* () {
      const throttle = yield* AuthThrottle
      for (let i = 0; i < AUTH_LIMITS.tracked + 50; i++) {
        yield* Effect.flip(throttle.guard({ surface: "sign_in", address: `10.0.${i >> 8}.${i & 255}`, credential: { kind: "project_key", keyId: `key_${i}` } }, fail))
      }
      expect(throttle.tracked()).toEqual({ addresses: AUTH_LIMITS.tracked, projectKeys: AUTH_LIMITS.tracked })
    }).pipe(Effect.provide(layer))
  )

  it("an address's bucket: IPv4 as is (also IPv4-mapped), IPv6 by its /64", () => {
    expect(addressBucket("203.0.113.7")).toBe("203.0.113.7")
    expect(addressBucket("::ffff:203.0.113.7")).toBe("203.0.113.7")
    expect(addressBucket("2001:db8:1:2::9")).toBe("2001:db8:1:2::/64")
    expect(addressBucket("2001:0db8:0001:0002:aaaa:bbbb:cccc:dddd")).toBe("2001:db8:1:2::/64")
    expect(addressBucket("2001:db8::1")).toBe("2001:db8:0:0::/64")
    expect(addressBucket("fe80::1%eth0")).toBe("fe80:0:0:0::/64")
    expect(addressBucket("::1")).toBe("0:0:0:0::/64")
    expect(addressBucket("unknown")).toBe("unknown")
  })
})
