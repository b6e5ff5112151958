/**
 * The real services for service-level model runs over an in-memory SQLite store: `ServicesLive`
 * on the live clock, or the governance services on Effect's TestClock so commands move time.
 * One runtime serves a whole property; each fc run gets its own projects (fresh ids), so runs
 * never see each other's state and no store is rebuilt per run.
 *
 * The models of the money path (the store port) run on both engines (`modelEngines`): a SQLite file
 * through the store worker, and PostgreSQL (a fresh schema of the test database per runtime, dropped
 * on dispose) when it answers — the same commands, the same invariant checks over the same rows.
 */
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Layer, ManagedRuntime, Option, TestClock, TestContext, type TestServices } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { makeSettings, Settings } from "../../../src/domain/config.ts"
import { ServicesLive } from "../../../src/server.ts"
import { IdempotencyStore } from "../../../src/services/IdempotencyStore.ts"
import { KeyRegistry } from "../../../src/services/KeyRegistry.ts"
import { Ledger } from "../../../src/services/Ledger.ts"
import { Projects } from "../../../src/services/Projects.ts"
import { RateLimiter } from "../../../src/services/RateLimiter.ts"
import { ReceiptKeyLive, ReceiptSigner } from "../../../src/services/ReceiptSigner.ts"
import { ChatStoreLive } from "../../../src/store/chatStoreLive.ts"
import { DatabaseLive, StoreDatabaseLive } from "../../../src/store/Database.ts"
import { ChatStore } from "../../../src/store/ChatStore.ts"
import { freshSchema, onEngines } from "../../support/pg.ts"

const servicesLayer = ServicesLive.pipe(Layer.provideMerge(Layer.succeed(Settings, makeSettings({ databaseUrl: "sqlite::memory:" }))))

/**
 * The governance services without the Gateway and the Recovery sweep, on TestClock (time starts at 0
 * and moves only by `advance`): for models where time matters. The sweep is left out on purpose: it
 * sleeps 30 s in a loop, so TestClock.adjust(24 h) would have to run it 2,880 times.
 */
const timedLayer = Layer.mergeAll(KeyRegistry.Default, Ledger.Default).pipe(
  Layer.provideMerge(Layer.mergeAll(Projects.Default, RateLimiter.Default, IdempotencyStore.Default, ReceiptSigner.Default)),
  Layer.provideMerge(DatabaseLive),
  Layer.provideMerge(Layer.succeed(Settings, makeSettings({ databaseUrl: "sqlite::memory:" })))
)

export const makeServicesRuntime = () => ManagedRuntime.make(timedLayer.pipe(Layer.provideMerge(TestContext.TestContext)))

/**
 * On the live clock, for models where time does not matter (the Ledger): TestContext makes every
 * call 3–4× slower, which the deep profile's 10,000 runs feel.
 */
export const makeLiveServicesRuntime = (): ServicesRuntime => ManagedRuntime.make(servicesLayer) as unknown as ServicesRuntime

/** The engines of the store port the money-path models run on. */
export type Engine = "sqlite" | "pg"

/** SQLite always; PostgreSQL too when it answers (always under CI), else a skip line says why. */
export const modelEngines: ReadonlyArray<Engine> = ["sqlite", ...(onEngines("test/model on PostgreSQL") ? (["pg"] as const) : [])]

/**
 * A store of `engine` for one runtime, in assertion mode (TOLLGATE_ASSERT): a fresh SQLite file, or
 * a fresh schema of the PostgreSQL test database (with the instance's own receipt key file, as a
 * PostgreSQL instance keeps it); `cleanup` removes it.
 */
const modelStore = (engine: Engine) => {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-model-"))
  const schema = engine === "pg" ? freshSchema() : undefined
  const settings = makeSettings({
    databaseUrl: schema?.url ?? `sqlite:${join(dir, "model.db")}`,
    assertInvariants: true,
    pgPoolSize: 4,
    ...(schema === undefined ? {} : { receiptKeyFile: Option.some(join(dir, "receipt-signing-key.pem")) })
  })
  const cleanup = () => {
    schema?.drop()
    rmSync(dir, { recursive: true, force: true })
  }
  return { settings: Layer.succeed(Settings, settings), cleanup }
}

const disposing = <R extends { dispose(): Promise<void> }>(rt: R, cleanup: () => void): R => {
  const dispose = rt.dispose.bind(rt)
  return Object.assign(rt, {
    dispose: async () => {
      await dispose()
      cleanup()
    }
  })
}

/**
 * What production runs, for the models of the money path: `ServicesLive` over a SQLite FILE, so the
 * store port (ChatStore) runs its transactions in the store worker, batched and group-committed,
 * exactly as it serves requests — or over PostgreSQL, where the port runs inline on the pool.
 */
export const makePortRuntime = (engine: Engine = "sqlite"): PortRuntime => {
  const store = modelStore(engine)
  return disposing(ManagedRuntime.make(ServicesLive.pipe(Layer.provideMerge(store.settings), Layer.orDie)), store.cleanup)
}
/**
 * The store port (in the worker on a SQLite file, or on PostgreSQL) with the governance services,
 * on TestClock: for the money-path models where time matters (idempotency expiry). No Gateway and
 * no Recovery sweep (see `timedLayer`); the transactions take their `now` from their arguments, as
 * the Gateway passes it.
 */
export const makeTimedPortRuntime = (engine: Engine = "sqlite"): TimedPortRuntime => {
  const store = modelStore(engine)
  const layer = Layer.mergeAll(Ledger.Default, ChatStoreLive.pipe(Layer.provide(ReceiptKeyLive))).pipe(
    Layer.provideMerge(Layer.mergeAll(Projects.Default, IdempotencyStore.Default, ReceiptSigner.Default)),
    Layer.provideMerge(StoreDatabaseLive),
    Layer.provideMerge(store.settings),
    Layer.provideMerge(TestContext.TestContext)
  )
  return disposing(ManagedRuntime.make(layer), store.cleanup)
}
export type TimedPortRuntime = ManagedRuntime.ManagedRuntime<ChatStore | Ledger | Projects | IdempotencyStore | ReceiptSigner | SqlClient.SqlClient | Settings | TestServices.TestServices, never>

export type PortRuntime = ManagedRuntime.ManagedRuntime<Layer.Layer.Success<typeof servicesLayer>, never>
export type PortServices = Layer.Layer.Success<typeof servicesLayer>

/**
 * Fiber yield budgets for racing operations: small budgets make fibers interleave statement by
 * statement. Budgets of 16 ops or fewer can make Effect 3's runtime hang on a contended Semaphore
 * (reproducible with a bare `Effect.makeSemaphore`, unrelated to Tollgate), so stay above that.
 */
export const yieldBudgets = [32, 64, 128, 2048] as const

export type ServicesRuntime = ReturnType<typeof makeServicesRuntime>
export type Services = ManagedRuntime.ManagedRuntime.Context<ServicesRuntime>

/** Run an effect on the runtime and return its Exit (failures and defects are data, for comparison). */
export const runExit = <A, E, R>(rt: ManagedRuntime.ManagedRuntime<R, never>, effect: Effect.Effect<A, E, R>) => rt.runPromiseExit(effect)

export const run = <A, E, R>(rt: ManagedRuntime.ManagedRuntime<R, never>, effect: Effect.Effect<A, E, R>): Promise<A> => rt.runPromise(effect)

/** Move the TestClock forward. */
export const advance = <R>(rt: ManagedRuntime.ManagedRuntime<R | TestServices.TestServices, never>, millis: number) =>
  rt.runPromise(TestClock.adjust(Duration.millis(millis)))

export const nowMillis = <R>(rt: ManagedRuntime.ManagedRuntime<R, never>) => rt.runPromise(Effect.clockWith((c) => c.currentTimeMillis))

/** Raw read of the store, for invariants the service interfaces do not expose; `?` placeholders on either engine. */
export const select = <Row extends object>(text: string, ...params: ReadonlyArray<unknown>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    let n = 0
    const dialectText = sql.onDialectOrElse({ pg: () => text.replace(/\?/g, () => `$${++n}`), orElse: () => text })
    return sql.unsafe<Row>(dialectText, params as Array<any>)
  }).pipe(Effect.orDie)

export const query = <Row extends object>(rt: ManagedRuntime.ManagedRuntime<SqlClient.SqlClient, never>, text: string, ...params: ReadonlyArray<unknown>) =>
  rt.runPromise(select<Row>(text, ...params))

/**
 * A runtime that is replaced by a fresh one (fresh in-memory store) every `runsPerStore` runs:
 * thousands of runs in one store make its tables large enough that the per-command invariant
 * queries dominate the deep profile.
 */
export class RuntimePool<R extends { dispose(): Promise<void> } = ServicesRuntime> {
  private current: R | undefined
  private used = 0
  private readonly retired: Array<R> = []
  constructor(private readonly make: () => R, private readonly runsPerStore = 250) {}

  /** The runtime for the next run. */
  next(): R {
    if (this.current === undefined || this.used >= this.runsPerStore) {
      if (this.current !== undefined) this.retired.push(this.current)
      this.current = this.make()
      this.used = 0
    }
    this.used++
    return this.current
  }

  async dispose(): Promise<void> {
    const all = [...this.retired, ...(this.current === undefined ? [] : [this.current])]
    this.retired.length = 0
    this.current = undefined
    await Promise.all(all.map((rt) => rt.dispose()))
  }
}
