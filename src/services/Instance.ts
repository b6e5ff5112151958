/**
 * This process's epoch (docs/contract.md §4, migration 0004): taken when the store opens, written on every
 * hold and idempotency claim the process makes, kept alive by the Gateway's heartbeat, and marked
 * stopped once a clean shutdown has resolved every call in flight. A restarted process resolves the
 * holds of the epochs known dead at once (src/services/Recovery.ts).
 */
import { Clock, Effect } from "effect"
import { Settings } from "../domain/config.ts"
import { Sqlite } from "../store/Database.ts"
import { makeEpochReads } from "../store/epochs.ts"

export class Instance extends Effect.Service<Instance>()("tollgate/Instance", {
  scoped: Effect.gen(function* () {
    const settings = yield* Settings
    const { db, transact } = yield* Sqlite
    const epochs = makeEpochReads(db)
    const startedAt = yield* Clock.currentTimeMillis
    const epoch = yield* transact(() => epochs.registerSync(settings.instanceId, startedAt), true)
    // Closed after the services that use it (the Gateway drains its calls first): nothing is held any more.
    yield* Effect.addFinalizer(() =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => transact(() => epochs.stopSync(epoch, now), true)).pipe(Effect.catchAllCause(() => Effect.void))
    )
    return { epoch, instanceId: settings.instanceId, startedAt } as const
  })
}) {}
