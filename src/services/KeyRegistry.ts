/**
 * Project-scoped API keys (docs/contract.md §2): authentication, creation, rotation with grace, revocation.
 *
 * Only the key id and SHA-256(secret) are stored. Authenticated keys are cached for
 * `keyCacheTtlMs` (default 1 s), which bounds how long a revocation made by another instance takes
 * to be seen; a revocation made through this instance drops the cache entry at once.
 */
import type { BudgetPeriod } from "../../spec/periods.ts"
import { Clock, Deferred, Effect, FiberId, Option, Stream } from "effect"
import { formatKey, hashSecret, newSecret, type ParsedKey, parseKey, sameHash } from "../domain/apiKey.ts"
import { Settings } from "../domain/config.ts"
import { BudgetCredits, checkField, checkUpstreamLimits, GraceSeconds, shownUpstreamLimits, type UpstreamLimitFields } from "../domain/adminFields.ts"
import { AdminConflict, AdminNotFound, InvalidApiKey, InvalidRequest } from "../domain/errors.ts"
import { type Environment, isEnvironment, newKeyId } from "../domain/ids.ts"
import { cursorPosition, type Page, pageOf, type PageRequest } from "../domain/paging.ts"
import type * as Wire from "../domain/wire/admin.ts"
import { makeKeyEvents } from "../store/keyEvents.ts"
import { type KeyRow, KeysRepo } from "../store/keysRepo.ts"
import { Projects } from "./Projects.ts"
import type { CallLimits, ScopeLimits } from "./UpstreamLimits.ts"

/** Who is calling: the tenant scope a request runs in. */
export interface Principal {
  readonly keyId: string
  readonly projectId: string
  readonly organization: string
  readonly environment: Environment
  readonly budgetCredits: number
  /** The project's budget period and time zone (spec/periods.ts); absent: month in UTC. */
  readonly budgetPeriod?: BudgetPeriod
  readonly timeZone?: string
  readonly rateLimit: { readonly requestsPerMinute: number; readonly burst: number }
  /** The project's and the key's tokens-per-minute and in-flight limits; undefined when none is set (src/services/UpstreamLimits.ts). */
  readonly limits: CallLimits | undefined
  /** The project's end users with limits of their own (migration 0022), by name; undefined when none has. */
  readonly endUserLimits?: ReadonlyMap<string, ScopeLimits> | undefined
}

/** A key's own limits and budget (issue 41), set with the key in its INSERT. */
interface KeyLimits extends UpstreamLimitFields {
  readonly budgetCredits: number | null
}
const NO_LIMITS: KeyLimits = { tokensPerMinute: null, maxConcurrent: null, budgetCredits: null }

/** A key row's upstream limits, the project's first: undefined when neither sets any. */
const limitsOf = (row: KeyRow): CallLimits | undefined => {
  const out: Array<ScopeLimits> = []
  if (row.project_tokens_per_minute !== null || row.project_max_concurrent !== null) {
    out.push({ scope: "project", id: `p:${row.project_id}`, tokensPerMinute: row.project_tokens_per_minute ?? undefined, maxConcurrent: row.project_max_concurrent ?? undefined })
  }
  if (row.tokens_per_minute !== null || row.max_concurrent !== null) {
    out.push({ scope: "key", id: `k:${row.id}`, tokensPerMinute: row.tokens_per_minute ?? undefined, maxConcurrent: row.max_concurrent ?? undefined })
  }
  return out.length === 0 ? undefined : out
}

/** Each key row's end-user limits, parsed once per row read (a cached row serves many calls). */
const parsedEndUserLimits = new WeakMap<KeyRow, ReadonlyMap<string, ScopeLimits> | undefined>()

/** The end users' limits a key row carries (src/store/keysRepo.ts), as each call's scope: undefined when none. */
const endUserLimitsOf = (row: KeyRow): ReadonlyMap<string, ScopeLimits> | undefined => {
  if (parsedEndUserLimits.has(row)) return parsedEndUserLimits.get(row)
  const raw = row.end_user_limits === null ? {} : (JSON.parse(row.end_user_limits) as Record<string, [number | null, number | null]>)
  const entries = Object.entries(raw).map(([user, [tpm, concurrent]]): [string, ScopeLimits] => [
    user,
    { scope: "end_user", id: `u:${row.project_id}/${user}`, tokensPerMinute: tpm ?? undefined, maxConcurrent: concurrent ?? undefined }
  ])
  const limits = entries.length === 0 ? undefined : new Map(entries)
  parsedEndUserLimits.set(row, limits)
  return limits
}

/** A call's upstream limits: its project's and key's, then its end user's own when it has some. */
export const callLimits = (principal: Principal, endUser: string | undefined): CallLimits | undefined => {
  const own = endUser === undefined ? undefined : principal.endUserLimits?.get(endUser)
  return own === undefined ? principal.limits : [...(principal.limits ?? []), own]
}

/** An issued key, its secret shown once (never stored): the admin API's `IssuedKey`. */
export type IssuedKey = typeof Wire.IssuedKey.Type

/** A rotation's answer: the new key and when the old one stops working. */
export type RotatedKey = typeof Wire.RotatedKey.Type

/** A key's state as the admin API shows it (its lists add `last_used_at`). */
export type KeyInfo = typeof Wire.KeyInfo.Type

/** The latest instant a Date holds, in ms since the epoch. */
const LATEST_DATE_MS = 8_640_000_000_000_000

/** A stored time as ISO 8601; one past the Date range (an expiry an earlier version wrote, issue 38) reads as the latest instant, not a 500. */
const iso = (ms: number | null): string | null => (ms === null ? null : new Date(Math.min(ms, LATEST_DATE_MS)).toISOString())

const keyStatus = (row: Pick<KeyRow, "revoked_at" | "expires_at">, now: number): KeyInfo["status"] =>
  row.revoked_at !== null ? "revoked" : row.expires_at === null ? "active" : now < row.expires_at ? "rotated" : "expired"

const invalid = (message: string) => new InvalidApiKey({ message })

/** What an unknown key id's secret is compared against: a hash no secret has (its preimage is unknown). */
const DUMMY_HASH = hashSecret(`tollgate-unknown-key-${Math.random()}`)
/** Cached key ids (known and unknown) at most. */
const MAX_CACHED_KEYS = 100_000

/** What every key event says of its key (never its secret or hash). */
const keyEventData = (keyId: string, projectId: string, environment: string) => ({ key_id: keyId, project_id: projectId, environment })

/** `Authorization: Bearer <token>`: one compiled pattern (no `g` flag, so `exec` keeps no state between calls). */
const BEARER = /^Bearer\s+(\S+)\s*$/i

export class KeyRegistry extends Effect.Service<KeyRegistry>()("tollgate/KeyRegistry", {
  scoped: Effect.gen(function* () {
    const repo = yield* KeysRepo
    const settings = yield* Settings
    const projects = yield* Projects
    /**
     * Key rows by id, and ids known to be unknown (row undefined): an unknown id is remembered for as
     * long as a known one, so a repeated guess costs exactly what a repeated wrong secret costs — one
     * cache hit and one SHA-256 compared in constant time — and its timing tells no key id apart.
     * Bounded: the oldest entries go first.
     */
    const cache = new Map<string, { readonly row: KeyRow | undefined; readonly fetchedAt: number }>()
    /** The store reads under way, by key id (`refreshKey`). */
    const reading = new Map<string, Deferred.Deferred<Option.Option<KeyRow>>>()
    const remember = (keyId: string, row: KeyRow | undefined, now: number) => {
      cache.delete(keyId)
      cache.set(keyId, { row, fetchedAt: now })
      if (cache.size > MAX_CACHED_KEYS) cache.delete(cache.keys().next().value!)
    }
    const dropProject = (projectId: string) => {
      for (const [id, entry] of cache) if (entry.row?.project_id === projectId) cache.delete(id)
      // A read under way may have begun before the change: the calls after it read again.
      reading.clear()
    }
    /** Forget a key's entry, and any read of it under way (begun, perhaps, before the change). */
    const forgetKey = (keyId: string) => {
      cache.delete(keyId)
      reading.delete(keyId)
    }
    // Changes announced by other instances (PostgreSQL LISTEN/NOTIFY) drop cache entries at once.
    const events = yield* makeKeyEvents
    yield* Effect.forkScoped(
      Stream.runForEach(events.changes, (c) =>
        Effect.sync(() => (c._tag === "Key" ? forgetKey(c.keyId) : dropProject(c.projectId)))
      )
    )

    const loadKey = (keyId: string) =>
      Effect.map(
        repo.find(keyId),
        (rows) => Option.fromNullable(rows[0])
      ).pipe(Effect.orDie)

    /** A cache entry fresh enough to trust at `now` (a row, or "no such key"), without touching the store. */
    const cachedEntry = (keyId: string, now: number) => {
      const hit = cache.get(keyId)
      return hit !== undefined && now - hit.fetchedAt < settings.keyCacheTtlMs ? hit : undefined
    }

    /**
     * Read a key row from the store and remember it, or remember that there is none — one read a key
     * at a time. When an entry ages out under load, every call that arrives before the read answers
     * misses it too; each reading on its own was a stampede (at 512 connections, hundreds of identical
     * reads a second, each waiting for one of the pool's few connections ahead of the lanes' turns).
     * The calls that miss while a read is under way wait for that read. The read runs in the registry's
     * scope, so a caller that goes away (its client hung up) does not cancel it for the others; a change
     * announced meanwhile forgets it, so the calls after the change read again.
     */
    const scope = yield* Effect.scope
    const refreshKey = (keyId: string, now: number): Effect.Effect<Option.Option<KeyRow>> =>
      Effect.suspend(() => {
        const under = reading.get(keyId)
        if (under !== undefined) return Deferred.await(under)
        const read = Deferred.unsafeMake<Option.Option<KeyRow>>(FiberId.none)
        reading.set(keyId, read)
        const done = loadKey(keyId).pipe(
          Effect.tap((row) => Effect.sync(() => reading.get(keyId) === read && remember(keyId, Option.getOrUndefined(row), now))),
          Effect.exit,
          Effect.flatMap((exit) => {
            if (reading.get(keyId) === read) reading.delete(keyId)
            return Deferred.done(read, exit)
          })
        )
        return Effect.zipRight(Effect.forkIn(done, scope), Deferred.await(read))
      })

    /**
     * The key row's verdict for a presented secret at `now`: the caller's scope, or why not. An
     * unknown key id is checked against a dummy hash, the same work as a wrong secret.
     */
    const verify = (row: KeyRow | undefined, parsed: ParsedKey, now: number): Principal | InvalidApiKey => {
      const matches = sameHash(hashSecret(parsed.secret), row?.secret_sha256 ?? DUMMY_HASH)
      if (row === undefined || !matches || row.environment !== parsed.environment) return invalid("Unknown API key.")
      if (row.revoked_at !== null) return invalid(`API key ${row.id} has been revoked.`)
      if (row.expires_at !== null && now >= row.expires_at) {
        return invalid(`API key ${row.id} was rotated and its grace period has ended; use its replacement.`)
      }
      return {
        keyId: row.id,
        projectId: row.project_id,
        organization: row.organization,
        environment: row.environment,
        budgetCredits: row.budget_credits,
        budgetPeriod: row.budget_period,
        timeZone: row.time_zone,
        rateLimit: { requestsPerMinute: row.requests_per_minute, burst: row.burst },
        limits: limitsOf(row),
        endUserLimits: endUserLimitsOf(row)
      }
    }

    /**
     * `Authorization: Bearer <token>` at `now`, from the cache alone: the caller's scope, the refusal
     * (401 invalid_api_key), or `{ miss }` when the key's row must be read from the store first.
     * Synchronous: the fast path (src/http/fast.ts) answers a cached key before it starts a fiber.
     */
    const authenticateCached = (authorization: string | undefined, now: number): Principal | InvalidApiKey | { readonly miss: ParsedKey } => {
      if (authorization === undefined || authorization.length === 0) {
        return invalid("Missing API key. Send it as 'Authorization: Bearer <key>'.")
      }
      const match = BEARER.exec(authorization)
      const parsed = match === null ? undefined : parseKey(match[1]!)
      if (parsed === undefined) return invalid("Malformed API key. Tollgate keys look like tg_dev_…; check for copy-paste damage.")
      const hit = cachedEntry(parsed.keyId, now)
      return hit === undefined ? { miss: parsed } : verify(hit.row, parsed, now)
    }

    const asEffect = (verdict: Principal | InvalidApiKey): Effect.Effect<Principal, InvalidApiKey> =>
      verdict instanceof InvalidApiKey ? Effect.fail(verdict) : Effect.succeed(verdict)

    /** A key `authenticateCached` missed: its row read from the store (and cached), then verified at `now`. */
    const authenticateMiss = (parsed: ParsedKey, now: number): Effect.Effect<Principal, InvalidApiKey> =>
      Effect.flatMap(refreshKey(parsed.keyId, now), (found) => asEffect(verify(Option.getOrUndefined(found), parsed, now)))

    /** `Authorization: Bearer <token>` → the caller's scope, or 401 invalid_api_key; only a cache miss reads the store. */
    const authenticate = (authorization: string | undefined): Effect.Effect<Principal, InvalidApiKey> =>
      Effect.clockWith((clock) => {
        const now = clock.unsafeCurrentTimeMillis()
        const verdict = authenticateCached(authorization, now)
        return "miss" in verdict ? authenticateMiss(verdict.miss, now) : asEffect(verdict)
      })

    /**
     * A key about to be issued: its row's values and the answer that shows its secret once, computed
     * before anything is written, so that a write never commits a key whose answer then fails.
     */
    const prepareKey = (projectId: string, environment: Environment, now: number, replaces: string | null, limits: KeyLimits = NO_LIMITS) => {
      const id = newKeyId()
      const secret = newSecret()
      const shown = shownUpstreamLimits(limits)
      const issued: IssuedKey = {
        id,
        object: "api_key",
        project_id: projectId,
        environment,
        secret: formatKey(id, environment, secret),
        created_at: new Date(now).toISOString(),
        ...(Object.keys(shown).length === 0 ? {} : { rate_limit: shown }),
        ...(limits.budgetCredits === null ? {} : { budget_credits: limits.budgetCredits })
      }
      return { issued, secretSha256: hashSecret(secret), now, replaces, limits }
    }

    const insertKey = (key: ReturnType<typeof prepareKey>) =>
      Effect.zipRight(
        Effect.sync(() => forgetKey(key.issued.id)), // an id guessed before it existed was cached as unknown
        repo.insert({
          id: key.issued.id,
          projectId: key.issued.project_id,
          environment: key.issued.environment,
          secretSha256: key.secretSha256,
          createdAt: key.now,
          replaces: key.replaces,
          tokensPerMinute: key.limits.tokensPerMinute,
          maxConcurrent: key.limits.maxConcurrent,
          budgetCredits: key.limits.budgetCredits
        })
      )

    const create = (
      projectId: string,
      environment: unknown,
      rateLimit?: { readonly tokens_per_minute?: number | null | undefined; readonly max_concurrent?: number | null | undefined },
      budgetCredits?: number | null
    ): Effect.Effect<IssuedKey, AdminNotFound | InvalidRequest> =>
      Effect.gen(function* () {
        if (!isEnvironment(environment)) {
          return yield* new InvalidRequest({ message: "environment must be one of development, staging, production.", param: "environment" })
        }
        const limits: KeyLimits = {
          ...(yield* checkUpstreamLimits(rateLimit)),
          budgetCredits: budgetCredits === undefined || budgetCredits === null ? null : yield* checkField(BudgetCredits, "budget_credits", budgetCredits)
        }
        const project = yield* projects.get(projectId)
        const key = prepareKey(projectId, environment, yield* Clock.currentTimeMillis, null, limits)
        // The key and its `key.created` event commit together (docs/contract.md, "Webhooks").
        yield* repo.withTransaction(
          Effect.zipRight(insertKey(key), repo.event({ type: "key.created", projectId, organization: project.organization, now: key.now, data: keyEventData(key.issued.id, projectId, environment) }))
        ).pipe(Effect.orDie)
        return key.issued
      })

    const findKey = (keyId: string) =>
      Effect.flatMap(loadKey(keyId), Option.match({
        onNone: () => Effect.fail(new AdminNotFound({ message: `No API key with id ${keyId}.` })),
        onSome: Effect.succeed
      }))

    const notRotatable = (keyId: string, status: KeyInfo["status"]) => new AdminConflict({ message: `API key ${keyId} is ${status} and cannot be rotated.` })

    /**
     * New key works at once; the old one keeps working for `graceSeconds` (bounded: src/domain/adminFields.ts),
     * then fails. Both answers are computed first; then one transaction claims the old key — guarded, so
     * a rotation or revocation that won the race since the read writes nothing here — and adds the new one.
     */
    const rotate = (keyId: string, graceSeconds: number): Effect.Effect<RotatedKey, AdminNotFound | AdminConflict | InvalidRequest> =>
      Effect.gen(function* () {
        yield* checkField(GraceSeconds, "grace_seconds", graceSeconds)
        const old = yield* findKey(keyId)
        const now = yield* Clock.currentTimeMillis
        const status = keyStatus(old, now)
        if (status !== "active") return yield* notRotatable(keyId, status)
        const expiresAt = now + graceSeconds * 1000
        // The new key keeps the old one's upstream limits and budget (its window starts empty: the old
        // key's calls stay charged to the old key, whose window the grace period may still add to).
        const fresh = prepareKey(old.project_id, old.environment, now, keyId, {
          tokensPerMinute: old.tokens_per_minute,
          maxConcurrent: old.max_concurrent,
          budgetCredits: old.key_budget_credits
        })
        const answer: RotatedKey = { ...fresh.issued, replaces: keyId, old_key_expires_at: new Date(expiresAt).toISOString() }
        const claimed = yield* repo.withTransaction(
          Effect.gen(function* () {
            const claim = yield* repo.claimRotation(keyId, expiresAt, fresh.issued.id)
            if (claim.length === 0) return false
            yield* insertKey(fresh)
            yield* repo.event({
              type: "key.rotated",
              projectId: old.project_id,
              organization: old.organization,
              now,
              data: { ...keyEventData(keyId, old.project_id, old.environment), replaced_by: fresh.issued.id, old_key_expires_at: answer.old_key_expires_at }
            })
            return true
          })
        ).pipe(Effect.orDie)
        if (!claimed) return yield* notRotatable(keyId, keyStatus(yield* findKey(keyId), now))
        forgetKey(keyId)
        yield* events.announce({ _tag: "Key", keyId })
        return answer
      })

    const revoke = (keyId: string): Effect.Effect<KeyInfo, AdminNotFound> =>
      Effect.gen(function* () {
        const old = yield* findKey(keyId)
        const now = yield* Clock.currentTimeMillis
        if (old.revoked_at === null) {
          // The revocation and its `key.revoked` event commit together; a revocation that lost the race writes neither.
          yield* repo.withTransaction(
            Effect.gen(function* () {
              const revoked = yield* repo.revoke(keyId, now)
              if (revoked.length === 0) return
              yield* repo.event({
                type: "key.revoked",
                projectId: old.project_id,
                organization: old.organization,
                now,
                data: { ...keyEventData(keyId, old.project_id, old.environment), revoked_at: new Date(now).toISOString() }
              })
            })
          ).pipe(Effect.orDie)
        }
        forgetKey(keyId)
        yield* events.announce({ _tag: "Key", keyId })
        return yield* info(keyId)
      })

    /**
     * Set key `keyId`'s own upstream limits (PATCH /admin/v1/keys/{id} `rate_limit`): absent keeps
     * one, null removes it, a value is checked. Every instance drops the key from its cache, so the
     * next call is limited by the new values. Answers the key's limits as set.
     */
    const setLimits = (
      keyId: string,
      patch: { readonly tokens_per_minute?: number | null | undefined; readonly max_concurrent?: number | null | undefined }
    ): Effect.Effect<{ tokens_per_minute?: number; max_concurrent?: number }, AdminNotFound | InvalidRequest> =>
      Effect.gen(function* () {
        const row = yield* findKey(keyId)
        // A field left out keeps the stored value; null removes it.
        const limits = yield* checkUpstreamLimits({
          tokens_per_minute: patch.tokens_per_minute === undefined ? row.tokens_per_minute : patch.tokens_per_minute,
          max_concurrent: patch.max_concurrent === undefined ? row.max_concurrent : patch.max_concurrent
        })
        yield* Effect.orDie(repo.setLimits(keyId, limits.tokensPerMinute, limits.maxConcurrent))
        forgetKey(keyId)
        yield* events.announce({ _tag: "Key", keyId })
        return shownUpstreamLimits(limits)
      })

    const info = (keyId: string): Effect.Effect<KeyInfo, AdminNotFound> =>
      Effect.gen(function* () {
        const row = yield* findKey(keyId)
        const now = yield* Clock.currentTimeMillis
        return toInfo(row, now)
      })

    const toInfo = (row: Omit<KeyRow, "organization" | "budget_credits" | "requests_per_minute" | "burst">, now: number): KeyInfo => ({
      id: row.id,
      object: "api_key",
      project_id: row.project_id,
      environment: row.environment,
      status: keyStatus(row, now),
      created_at: iso(row.created_at)!,
      expires_at: iso(row.expires_at),
      revoked_at: iso(row.revoked_at),
      replaces: row.replaces,
      replaced_by: row.replaced_by
    })

    /**
     * A page of a project's keys, oldest first (src/domain/paging.ts); `environment`: only that
     * environment's (a team's). The cursor is one of those keys' id; another one is a 400.
     */
    const list = (projectId: string, environment: Environment | undefined, request: PageRequest): Effect.Effect<Page<KeyInfo>, AdminNotFound | InvalidRequest> =>
      Effect.gen(function* () {
        yield* projects.get(projectId)
        const position = yield* cursorPosition(request, (cursor) => Effect.orDie(repo.position(projectId, environment, cursor)))
        const now = yield* Clock.currentTimeMillis
        const rows = yield* Effect.orDie(repo.page(projectId, environment, position, request.limit + 1))
        return pageOf(rows, request.limit, (r) => toInfo(r, now))
      })

    /** Drop cached state for a project (its cap or rate limit changed). */
    const forgetProject = (projectId: string) =>
      Effect.zipRight(Effect.sync(() => dropProject(projectId)), events.announce({ _tag: "Project", projectId }))

    return { authenticate, authenticateCached, authenticateMiss, create, rotate, revoke, setLimits, info, list, forgetProject } as const
  }),
  dependencies: [KeysRepo.Default]
}) {}
