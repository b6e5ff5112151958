/**
 * Failed authentication, throttled (issue 38, finding 3): the dashboard's sign-in (POST
 * /admin/v1/session) and the bearer admin token on /admin/*. An attempt that presents a credential
 * first takes one token from each bucket it belongs to — its client address, and what it guessed at
 * (a project key, by its id; the admin token, one for the whole gateway) — and when any of them is
 * empty it is answered 429 `rate_limited` with Retry-After WITHOUT its credential being checked: a
 * throttled guess learns nothing, not even whether it was right. A success gives its tokens back, so
 * only failures count.
 *
 * Each bucket is the GCRA of spec/rateLimit.ts (`checkGcra`), on Effect's Clock. Memory is bounded:
 * at most `AUTH_LIMITS.tracked` addresses and as many key ids; past that the one that failed least
 * recently is forgotten. Forgetting gives an attacker back at most one burst for an address, after
 * burning `tracked` other addresses; the key id's and the admin token's buckets still hold.
 *
 * The admin token's bucket is shared by every address: a distributed guesser gets at most its rate,
 * wherever the guesses come from. The price is that such a flood also answers the operator's bearer
 * calls and sign-ins 429 until it stops (a throttled check cannot tell the right token from a guess);
 * a signed-in dashboard session is not affected (a cookie is not a guess at the admin token).
 */
import { Clock, Effect } from "effect"
import { isIPv4, isIPv6 } from "node:net"
import { checkGcra, emissionIntervalMicros, type GcraState, type RateLimit } from "../../spec/rateLimit.ts"
import { parseKey } from "../domain/apiKey.ts"
import { RateLimited } from "../domain/errors.ts"
import { Metrics } from "./Metrics.ts"
import { formatDuration } from "./RateLimiter.ts"

/** Where an attempt arrived: the dashboard's sign-in, or an admin call's bearer token. */
export type AuthSurface = "sign_in" | "admin_token"

/** What an attempt guessed at: the admin token, or a project key (its id when the token is well-formed). */
export type Credential = { readonly kind: "admin_token" } | { readonly kind: "project_key"; readonly keyId: string | undefined }

/** The credential a sign-in token guesses at: a `tg_…` token is a project key, anything else the admin token. */
export const credentialOf = (token: string): Credential =>
  token.startsWith("tg_") ? { kind: "project_key", keyId: parseKey(token)?.keyId } : { kind: "admin_token" }

export interface AuthAttempt {
  readonly surface: AuthSurface
  /** The client's address (src/http/session.ts `clientOf`: the socket's peer, or what a trusted proxy says). */
  readonly address: string
  readonly credential: Credential
}

export const AUTH_LIMITS = {
  /** Failures per client address (IPv6: per /64, what one subscriber usually holds): 10 at once, then one per 6 s. */
  address: { requestsPerMinute: 10, burst: 10 },
  /** Failures per project key id, from any address: the same. */
  projectKey: { requestsPerMinute: 10, burst: 10 },
  /** Failures at the admin token, every address together: 60 at once, then one a second. */
  adminToken: { requestsPerMinute: 60, burst: 60 },
  /** Addresses, and key ids, tracked at most (each). */
  tracked: 10_000
} as const

/** Which limit refused an attempt (the `limit` label of tollgate_auth_throttled_total). */
export type AuthLimit = "address" | "project_key" | "admin_token"

/**
 * The bucket of an address: an IPv4 address (also when IPv4-mapped), or the /64 of an IPv6 one —
 * one host or one subscriber, who may hold a whole /64.
 */
export const addressBucket = (address: string): string => {
  const bare = address.replace(/%.*$/, "")
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(bare)
  if (mapped !== null) return mapped[1]!
  if (isIPv4(bare) || !isIPv6(bare)) return bare
  const [head = "", tail] = bare.split("::")
  const front = head === "" ? [] : head.split(":")
  const back = tail === undefined || tail === "" ? [] : tail.split(":")
  const backGroups = back.reduce((n, g) => n + (g.includes(".") ? 2 : 1), 0)
  const groups = tail === undefined ? front : [...front, ...Array<string>(8 - front.length - backGroups).fill("0"), ...back]
  return `${groups.slice(0, 4).map((g) => parseInt(g, 16).toString(16)).join(":")}::/64`
}

/** GCRA states by name, at most `cap` of them; the name charged least recently is forgotten first. */
class Buckets {
  private readonly tats = new Map<string, GcraState>()
  constructor(readonly limit: RateLimit, private readonly cap: number) {}
  check(name: string, nowMicros: number) {
    return checkGcra(this.tats.get(name) ?? 0, this.limit, nowMicros)
  }
  charge(name: string, tat: GcraState): void {
    this.tats.delete(name)
    if (this.tats.size >= this.cap) this.tats.delete(this.tats.keys().next().value!)
    this.tats.set(name, tat)
  }
  refund(name: string): void {
    const tat = this.tats.get(name)
    if (tat !== undefined) this.tats.set(name, tat - emissionIntervalMicros(this.limit))
  }
  get size(): number {
    return this.tats.size
  }
}

export class AuthThrottle extends Effect.Service<AuthThrottle>()("tollgate/AuthThrottle", {
  effect: Effect.gen(function* () {
    const metrics = yield* Metrics
    const addresses = new Buckets(AUTH_LIMITS.address, AUTH_LIMITS.tracked)
    const projectKeys = new Buckets(AUTH_LIMITS.projectKey, AUTH_LIMITS.tracked)
    const adminToken = new Buckets(AUTH_LIMITS.adminToken, 1)

    /** The buckets an attempt takes a token from, each with its name and the limit it stands for. */
    const bucketsOf = (attempt: AuthAttempt): ReadonlyArray<readonly [Buckets, string, AuthLimit]> => {
      const byAddress = [addresses, addressBucket(attempt.address), "address"] as const
      const c = attempt.credential
      if (c.kind === "admin_token") return [byAddress, [adminToken, "admin", "admin_token"]]
      return c.keyId === undefined ? [byAddress] : [byAddress, [projectKeys, c.keyId, "project_key"]]
    }

    /**
     * Run `check` (the credential's check) unless the attempt is throttled: then fail with
     * RateLimited, `check` not run. A failed check keeps its tokens taken and is counted; a success
     * gives them back.
     */
    const guard = <A, E, R>(attempt: AuthAttempt, check: Effect.Effect<A, E, R>): Effect.Effect<A, E | RateLimited, R> =>
      Effect.flatMap(Clock.currentTimeMillis, (now): Effect.Effect<A, E | RateLimited, R> => {
        const buckets = bucketsOf(attempt)
        const decisions = buckets.map(([b, name]) => b.check(name, now * 1000))
        // Refused by the bucket that frees up last: its wait is the Retry-After.
        let refused: { readonly limit: AuthLimit; readonly waitMicros: number } | undefined
        for (const [i, d] of decisions.entries()) {
          if (d._tag === "Limited" && (refused === undefined || d.retryAfterMicros > refused.waitMicros)) refused = { limit: buckets[i]![2], waitMicros: d.retryAfterMicros }
        }
        if (refused !== undefined) {
          metrics.authThrottled(attempt.surface, refused.limit)
          const waitMs = Math.ceil(refused.waitMicros / 1000)
          return Effect.fail(new RateLimited({ message: `Too many failed sign-ins or admin-token checks; retry after ${formatDuration(waitMs)}.`, retryAfterMs: waitMs }))
        }
        for (const [i, d] of decisions.entries()) buckets[i]![0].charge(buckets[i]![1], d.state)
        return Effect.tapBoth(check, {
          onFailure: () => Effect.sync(() => metrics.authFailure(attempt.surface)),
          onSuccess: () => Effect.sync(() => buckets.forEach(([b, name]) => b.refund(name)))
        })
      })

    /** How many addresses and key ids are tracked now (bounded by AUTH_LIMITS.tracked each). */
    const tracked = () => ({ addresses: addresses.size, projectKeys: projectKeys.size })

    return { guard, tracked } as const
  })
}) {}
