/**
 * Key changes across instances (PostgreSQL LISTEN/NOTIFY): an instance that revokes or rotates a key,
 * or changes a project's cap or limit, announces it on the `tollgate_keys` channel; every instance
 * drops that key (or the project's keys) from its cache at once. The cache's TTL
 * (TOLLGATE_KEY_CACHE_TTL_MS, 1 s) stays the bound when a notification is lost (a listening
 * connection that dropped): a change reaches every instance within it either way.
 * On SQLite (one instance) there is nothing to announce.
 */
import { PgClient } from "@effect/sql-pg"
import { Effect, Option, Stream } from "effect"

const CHANNEL = "tollgate_keys"

export type KeyChange = { readonly _tag: "Key"; readonly keyId: string } | { readonly _tag: "Project"; readonly projectId: string }

const encode = (c: KeyChange) => (c._tag === "Key" ? `key:${c.keyId}` : `project:${c.projectId}`)
const decode = (payload: string): KeyChange | undefined =>
  payload.startsWith("key:") ? { _tag: "Key", keyId: payload.slice(4) } : payload.startsWith("project:") ? { _tag: "Project", projectId: payload.slice(8) } : undefined

export interface KeyEvents {
  /** Tell every other instance (best effort: the cache TTL is the bound when it is lost). */
  readonly announce: (change: KeyChange) => Effect.Effect<void>
  /** The changes other instances announce (none on SQLite). */
  readonly changes: Stream.Stream<KeyChange>
}

export const makeKeyEvents: Effect.Effect<KeyEvents> = Effect.map(Effect.serviceOption(PgClient.PgClient), (pg) =>
  Option.match(pg, {
    onNone: () => ({ announce: () => Effect.void, changes: Stream.empty }),
    onSome: (client) => ({
      // pg_notify rather than the client's `notify` (whose NOTIFY with a bound parameter PostgreSQL refuses).
      announce: (change) => client`SELECT pg_notify(${CHANNEL}, ${encode(change)})`.pipe(Effect.ignoreLogged),
      changes: client.listen(CHANNEL).pipe(
        Stream.filterMap((payload) => Option.fromNullable(decode(payload))),
        Stream.catchAllCause((cause) => Stream.fromEffect(Effect.logWarning("key change feed failed; the key cache TTL bounds revocation meanwhile", cause)).pipe(Stream.drain))
      )
    })
  })
)
