/**
 * The store port of the governed call (and of the recovery sweep): `ChatStoreApi` below, plain-data
 * arguments and results, no SQLite type in its signature — what a second engine implements.
 *
 * The one place that chooses where its transactions (src/store/chatTransactions.ts) run:
 * - a file store: in the store worker (src/store/storeWorker.ts), a thread with its own connection,
 *   so the statements, the commits' fsyncs and the receipt signatures leave the event loop;
 * - an in-memory store (or TOLLGATE_STORE_WORKER=false): inline, on the main connection's
 *   group-committed `transact`.
 * Either way a caller resumes only after its transaction is durable, and waits uninterruptibly once
 * it was sent: the transaction will run, and the caller must see how it ended.
 */
import { Clock, Context, Effect, Exit, Layer, Runtime } from "effect"
import type { KeyObject } from "node:crypto"
import { Worker } from "node:worker_threads"
import { Settings } from "../domain/config.ts"
import { timeline } from "../domain/timeline.ts"
import {
  type AbandonArgs,
  type ChatOp,
  type ExpireArgs,
  type ExtendArgs,
  type HeartbeatArgs,
  makeChatTransactions,
  mustSync,
  type ReserveArgs,
  type Reserved,
  type ReserveRefused,
  type SettleArgs
} from "./chatTransactions.ts"
import { Sqlite } from "./Database.ts"
import { fastestSealer, sodiumModule } from "./sodium.ts"
import { sqliteFilename } from "../domain/databaseUrl.ts"
import type { Call, FromWorker, StoreWorkerData, ToWorker, WorkerTiming } from "./storeWorker.ts"
import { outcomeExit, type TxOutcome } from "./syncTransactions.ts"

export type { AbandonArgs, ExpireArgs, ExtendArgs, ReserveArgs, Reserved, ReserveRefused, SettleArgs } from "./chatTransactions.ts"

/** The key the settlement transaction signs receipts with (src/services/ReceiptSigner.ts provides it). */
export interface ReceiptKeyApi {
  readonly keyId: string
  readonly signingKey: KeyObject
}
export class ReceiptKey extends Context.Tag("tollgate/ReceiptKey")<ReceiptKey, ReceiptKeyApi>() {}

export interface ChatStoreApi {
  readonly reserve: (args: ReserveArgs) => Effect.Effect<Reserved, ReserveRefused>
  readonly settle: (args: SettleArgs) => Effect.Effect<void>
  readonly abandon: (args: AbandonArgs) => Effect.Effect<void>
  readonly extend: (args: ExtendArgs) => Effect.Effect<void>
  /** This epoch is alive; open streams' progress marks (src/store/epochs.ts). */
  readonly heartbeat: (args: HeartbeatArgs) => Effect.Effect<void>
  /** The recovery sweep: void the holds past their deadline; how many it voided. */
  readonly expire: (args: ExpireArgs) => Effect.Effect<number>
  /**
   * Everything committed so far is on disk, by callback: a stream's reservation is committed without
   * its own fsync, so that this runs while its upstream opens, and the stream's headers wait for it
   * (docs/decisions/0013); `done` is told once how it ended, as an `Exit` (no fiber waits for it,
   * 0038). Absent: every commit that needs the disk already waited for it.
   */
  readonly syncThen?: (done: (outcome: Exit.Exit<void>) => void) => void
  /**
   * The settlement by callback, where the transactions run in the store worker: the same
   * transaction as `settle`, and `done` told once how it ended — once its commit is durable, or the
   * defect — as an `Exit` (plain data here: no fiber runs it). For a governed call's common path,
   * which holds no fiber while its settlement is written (docs/decisions/0036). Absent where
   * transactions are effects (inline, PostgreSQL): callers then use `settle`.
   */
  readonly settleThen?: (args: SettleArgs, done: (outcome: Exit.Exit<void>) => void) => void
  /**
   * The reservation by callback, as `settleThen`: the same transaction as `reserve`, `done` told
   * once how it ended — the reservation, its refusal, or the defect — as an `Exit` (docs/decisions/0037).
   */
  readonly reserveThen?: (args: ReserveArgs, done: (outcome: Exit.Exit<Reserved, ReserveRefused>) => void) => void
  /** Whether transactions can run now (the store worker is up), for GET /readyz. */
  readonly health: () => StoreHealth
  /** Where the transactions run. */
  readonly runsIn: "worker" | "inline"
}

/**
 * The port as the governed call uses it: every transaction it waits for by callback, the one style
 * of the call's lifecycle (src/services/gateway/inflight.ts).
 */
export interface ChatPort extends ChatStoreApi {
  readonly syncThen: NonNullable<ChatStoreApi["syncThen"]>
  readonly reserveThen: NonNullable<ChatStoreApi["reserveThen"]>
  readonly settleThen: NonNullable<ChatStoreApi["settleThen"]>
}

/**
 * The store's callback forms: its own where it has them (the store worker's); otherwise — inline
 * SQLite, PostgreSQL, whose transactions are effects — each transaction run in a fiber of `runtime`
 * that nothing interrupts (it was sent: the caller must see how it ended), and a sync that has nothing
 * to wait for (every commit there that needs the disk waited for it). Built once, when the Gateway starts.
 */
export const callbackPort = (store: ChatStoreApi, runtime: Runtime.Runtime<never>): ChatPort => {
  const runFork = Runtime.runFork(runtime)
  return {
    ...store,
    syncThen: store.syncThen ?? ((done) => done(Exit.void)),
    reserveThen: store.reserveThen ?? ((args, done) => void runFork(store.reserve(args)).addObserver(done)),
    settleThen: store.settleThen ?? ((args, done) => void runFork(store.settle(args)).addObserver(done))
  }
}

/** Whether the store serves: unavailable (GET /readyz answers 503), or serving, possibly degraded (said, 200). */
export type StoreHealth = { readonly ok: true; readonly degraded?: string } | { readonly ok: false; readonly reason: string }

type Run = <E = never>(op: ChatOp | "sync", args: unknown) => Effect.Effect<unknown, E>

/** A defect from the worker arrives as `{ name, message }`: make it an Error again. */
const revive = (outcome: TxOutcome): TxOutcome => {
  if (outcome._tag !== "Died") return outcome
  const d = outcome.defect as { name?: unknown; message?: unknown } | null
  if (d === null || typeof d !== "object" || typeof d.message !== "string") return outcome
  const error = new Error(`store worker: ${d.message}`)
  if (typeof d.name === "string") error.name = d.name
  return { _tag: "Died", defect: error }
}

/** The store worker's entry module. A test may start another one (that wraps it) to make it die. */
export class StoreWorkerEntry extends Context.Reference<StoreWorkerEntry>()("tollgate/StoreWorkerEntry", {
  defaultValue: () => new URL("./storeWorker.mjs", import.meta.url)
}) {}

/** Restart backoff after the worker dies: doubles from the first to the last, reset by a minute of life. */
const RESTART_FIRST_MS = 100
const RESTART_MAX_MS = 30_000
const STABLE_MS = 60_000

/** One started worker and what it owes. */
interface Live {
  readonly worker: Worker
  readonly pending: Map<number, (outcome: TxOutcome) => void>
  /** The calls of the current event-loop turn, sent together when its I/O callbacks are done. */
  outbox: Array<Call>
  error: Error | undefined
  readonly startedAt: number
}

const closedError = () => new Error("the store is closed (the gateway is shutting down)")

/**
 * Start the worker and supervise it. A worker that dies (a native crash, running out of memory)
 * fails the calls it still owed — whether their transactions committed is for the ledger to say; a
 * hold that did commit is voided by the recovery sweep — and is started again after a backoff;
 * meanwhile calls fail at once, and `health` says why (GET /readyz answers 503).
 */
const startWorker = (data: StoreWorkerData) =>
  Effect.gen(function* () {
    const runtime = yield* Effect.runtime<never>()
    const runFork = Runtime.runFork(runtime)
    const now = () => Runtime.runSync(runtime)(Clock.currentTimeMillis)
    const entry = yield* StoreWorkerEntry

    let current: Live | undefined
    let down: string | undefined
    let closing = false
    let restartDelay = RESTART_FIRST_MS

    // TOLLGATE_TIMELINE=1: the governed call's hand-offs (its reserve, settle or abandon; one caller
    // at a time, so the reply that comes back is the one sent), not the background beats'.
    let timedOp: string | undefined
    let postingAt = 0
    const timedSend = (op: ChatOp | "sync") => {
      timedOp = op === "reserve" || op === "settle" || op === "abandon" ? op : undefined
      if (timedOp !== undefined) timeline.mark(`${timedOp}: main thread, until posted`)
    }
    const timedReply = (timing: WorkerTiming) => {
      if (timedOp === undefined) return
      timeline.mark(`${timedOp}: worker round trip`)
      // Counted from before the post: on two cores the woken worker often runs its whole transaction
      // while the posting thread waits for the CPU, so the split at "until posted" moves from call to call.
      const handOff = performance.now() - postingAt
      timeline.span(`${timedOp}: hand-off, from posting to the reply`, handOff)
      timeline.span(`${timedOp} (in worker): the two thread hops (hand-off − worker's time)`, handOff - timing.wait - timing.body - timing.commit)
      timeline.span(`${timedOp} (in worker): BEGIN (batch start)`, timing.wait)
      timeline.span(`${timedOp} (in worker): statements incl. sign`, timing.body)
      if (timedOp === "settle") timeline.span(`${timedOp} (in worker): sign`, timing.sign)
      timeline.span(`${timedOp} (in worker): commit + fsync`, timing.commit)
      timedOp = undefined
    }

    const send = (live: Live) => {
      if (live.outbox.length === 0) return
      const calls = live.outbox
      live.outbox = []
      if (timeline.on) postingAt = performance.now()
      live.worker.postMessage({ _tag: "Run", calls } satisfies ToWorker)
      if (timeline.on) timedSend(calls[0]!.op)
    }

    const spawn = (): Live => {
      const worker = new Worker(entry, { workerData: data, execArgv: [] })
      const live: Live = { worker, pending: new Map(), outbox: [], error: undefined, startedAt: now() }
      worker.on("message", (message: FromWorker) => {
        if (message._tag !== "Done") return
        for (const { id, outcome, timing } of message.replies) {
          if (timing !== undefined) timedReply(timing)
          const done = live.pending.get(id)
          live.pending.delete(id)
          done?.(revive(outcome))
        }
      })
      worker.on("error", (e) => {
        live.error = e
      })
      // Its replies posted before it ended arrive before this: what is still pending was never answered.
      worker.on("exit", (code) => {
        const error = closing ? closedError() : new Error(`the store worker stopped (exit code ${code}${live.error === undefined ? "" : `: ${live.error.message}`})`)
        const owed = live.pending.size
        for (const done of live.pending.values()) done({ _tag: "Died", defect: error })
        live.pending.clear()
        if (closing || current !== live) return
        current = undefined
        restartDelay = now() - live.startedAt >= STABLE_MS ? RESTART_FIRST_MS : restartDelay
        down = `${error.message}; restarting in ${restartDelay} ms`
        runFork(Effect.logError(`${down}; ${owed} transaction(s) in flight failed`))
        const delay = restartDelay
        restartDelay = Math.min(RESTART_MAX_MS, restartDelay * 2)
        setTimeout(() => {
          if (closing) return
          current = spawn()
          down = undefined
        }, delay).unref()
      })
      // Once it is up the HTTP server keeps the process alive, not the worker; until then the worker
      // does (a start awaited at the top level must not find an empty event loop).
      worker.once("message", () => worker.unref())
      return live
    }

    // The first start must succeed: a store that cannot open fails the gateway's start.
    const first = spawn()
    yield* Effect.async<void>((resume) => {
      const onError = (e: Error) => resume(Effect.die(e))
      first.worker.once("error", onError)
      first.worker.once("message", () => {
        first.worker.off("error", onError)
        resume(Effect.void)
      })
    })
    current = first

    // Shutdown (after the Gateway, whose calls have finished): the worker commits what it received,
    // closes its connection and ends; wait for that.
    yield* Effect.addFinalizer(() =>
      Effect.async<void>((resume) => {
        closing = true
        const live = current
        if (live === undefined) return resume(Effect.void)
        live.worker.once("exit", () => resume(Effect.void))
        live.worker.ref()
        send(live)
        live.worker.postMessage({ _tag: "Close" } satisfies ToWorker)
      })
    )

    let nextId = 0
    /** Send one transaction to the worker; `reply` is told how it ended, once. */
    const post = (op: ChatOp | "sync", args: unknown, reply: (outcome: TxOutcome) => void): void => {
      const live = current
      if (closing || live === undefined) {
        return reply({ _tag: "Died", defect: closing ? closedError() : new Error(`the store is unavailable: ${down ?? "starting"}`) })
      }
      const id = nextId++
      // An idle worker gets the call at once: nobody else is waiting to share its commit, and a
      // turn's wait is pure latency for the one caller. While the worker has calls in flight, the
      // calls of this turn go together when its I/O callbacks are done, and share a group commit.
      const idle = live.pending.size === 0 && live.outbox.length === 0
      live.pending.set(id, reply)
      if (live.outbox.length === 0 && !idle) setImmediate(() => send(live))
      live.outbox.push({ id, op, args })
      if (idle) send(live)
    }
    const run: Run = <E>(op: ChatOp | "sync", args: unknown) =>
      Effect.async<unknown, E>((resume) => post(op, args, (outcome) => resume(outcomeExit<unknown, E>(outcome)))).pipe(Effect.uninterruptible)

    const health = (): StoreHealth => (closing ? { ok: false, reason: "closed" } : down === undefined ? { ok: true } : { ok: false, reason: down })
    return { run, post, health }
  })

export class ChatStore extends Context.Tag("tollgate/ChatStore")<ChatStore, ChatStoreApi>() {
  static readonly Default: Layer.Layer<ChatStore, never, Settings | Sqlite | ReceiptKey> = Layer.scoped(
    ChatStore,
    Effect.gen(function* () {
      const settings = yield* Settings
      const store = yield* Sqlite
      const signer = yield* ReceiptKey
      const filename = sqliteFilename(settings.databaseUrl)
      const inWorker = settings.storeWorker && filename !== ":memory:"
      let run: Run
      let post: ((op: ChatOp | "sync", args: unknown, reply: (outcome: TxOutcome) => void) => void) | undefined
      let health = (): StoreHealth => ({ ok: true })
      if (inWorker) {
        ;({ run, post, health } = yield* startWorker({
          filename,
          signingKey: signer.signingKey,
          signingKeyId: signer.keyId,
          sodium: sodiumModule(),
          assertInvariants: settings.assertInvariants
        }))
      } else {
        const ops = makeChatTransactions(
          store.db,
          { keyId: signer.keyId, seal: fastestSealer(signer.signingKey) },
          { assertInvariants: settings.assertInvariants }
        )
        run = <E>(op: ChatOp | "sync", args: unknown) =>
          op === "sync"
            ? Effect.void
            : store.transact<unknown, E>((abort) => (ops[op] as (a: unknown, abort: (e: E) => never) => unknown)(args, abort), mustSync(op, args))
      }
      return {
        reserve: (args) => run<ReserveRefused>("reserve", args) as Effect.Effect<Reserved, ReserveRefused>,
        settle: (args) => Effect.asVoid(run("settle", args)),
        abandon: (args) => Effect.asVoid(run("abandon", args)),
        extend: (args) => Effect.asVoid(run("extend", args)),
        heartbeat: (args) => Effect.asVoid(run("heartbeat", args)),
        expire: (args) => run("expire", args) as Effect.Effect<number>,
        ...(post !== undefined
          ? {
              syncThen: (done: (outcome: Exit.Exit<void>) => void) => post("sync", undefined, (outcome) => done(outcomeExit(outcome))),
              reserveThen: (args: ReserveArgs, done: (outcome: Exit.Exit<Reserved, ReserveRefused>) => void) =>
                post("reserve", args, (outcome) => done(outcomeExit(outcome))),
              settleThen: (args: SettleArgs, done: (outcome: Exit.Exit<void>) => void) => post("settle", args, (outcome) => done(outcomeExit(outcome)))
            }
          : {}),
        health,
        runsIn: inWorker ? "worker" : "inline"
      }
    })
  )
}
