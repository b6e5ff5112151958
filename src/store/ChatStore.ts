/**
 * Where the governed call's write transactions run (src/store/chatTransactions.ts):
 * - a file store: in the store worker (src/store/storeWorker.ts), a thread with its own connection,
 *   so the statements, the commits' fsyncs and the receipt signatures leave the event loop;
 * - an in-memory store (or TOLLGATE_STORE_WORKER=false): inline, on the main connection's
 *   group-committed `transact`.
 * Either way a caller resumes only after its transaction is durable, and waits uninterruptibly once
 * it was sent: the transaction will run, and the caller must see how it ended.
 */
import { Context, Effect, Layer, Runtime } from "effect"
import { Worker } from "node:worker_threads"
import { Settings } from "../domain/config.ts"
import { ReceiptSigner } from "../services/ReceiptSigner.ts"
import { type AbandonArgs, type ChatOp, type ExtendArgs, makeChatTransactions, type ReserveArgs, type ReserveRefused, type SettleArgs } from "./chatTransactions.ts"
import { Sqlite } from "./Database.ts"
import { sqliteFilename } from "./databaseUrl.ts"
import type { Call, FromWorker, StoreWorkerData, ToWorker } from "./storeWorker.ts"
import { outcomeEffect, type TxOutcome } from "./syncTransactions.ts"

export type { ReserveRefused } from "./chatTransactions.ts"

export interface ChatStoreApi {
  readonly reserve: (args: ReserveArgs) => Effect.Effect<void, ReserveRefused>
  readonly settle: (args: SettleArgs) => Effect.Effect<void>
  readonly abandon: (args: AbandonArgs) => Effect.Effect<void>
  readonly extend: (args: ExtendArgs) => Effect.Effect<void>
  /** Where the transactions run. */
  readonly runsIn: "worker" | "inline"
}

type Run = <E = never>(op: ChatOp, args: unknown) => Effect.Effect<void, E>

/** A defect from the worker arrives as `{ name, message }`: make it an Error again. */
const revive = (outcome: TxOutcome): TxOutcome => {
  if (outcome._tag !== "Died") return outcome
  const d = outcome.defect as { name?: unknown; message?: unknown } | null
  if (d === null || typeof d !== "object" || typeof d.message !== "string") return outcome
  const error = new Error(`store worker: ${d.message}`)
  if (typeof d.name === "string") error.name = d.name
  return { _tag: "Died", defect: error }
}

const startWorker = (data: StoreWorkerData) =>
  Effect.gen(function* () {
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    const worker = new Worker(new URL("./storeWorker.mjs", import.meta.url), { workerData: data, execArgv: [] })
    const pending = new Map<number, (outcome: TxOutcome) => void>()
    /** Set once the worker is gone: later calls fail at once instead of waiting for a reply. */
    let gone: Error | undefined
    let closing = false

    yield* Effect.async<void>((resume) => {
      const onError = (e: Error) => resume(Effect.die(e))
      worker.once("error", onError)
      worker.once("message", () => {
        worker.off("error", onError)
        resume(Effect.void)
      })
    })
    worker.on("message", (message: FromWorker) => {
      if (message._tag !== "Done") return
      for (const { id, outcome } of message.replies) {
        const done = pending.get(id)
        pending.delete(id)
        done?.(revive(outcome))
      }
    })
    // A worker that fails or exits fails what it still owed (its replies posted before it ended arrive first).
    worker.on("error", (e) => {
      gone = e
    })
    worker.on("exit", (code) => {
      if (!closing) {
        runFork(Effect.logError(`the store worker stopped (exit code ${code}${gone === undefined ? "" : `: ${gone.message}`}); governed calls fail until Tollgate restarts`))
      }
      gone ??= new Error(closing ? "the store is closed (the gateway is shutting down)" : `the store worker exited (code ${code})`)
      for (const done of pending.values()) done({ _tag: "Died", defect: gone })
      pending.clear()
    })
    // The HTTP server keeps the process alive, not the worker.
    worker.unref()

    // The calls of one event-loop turn go as one message, sent when the turn's I/O callbacks are done.
    let outbox: Array<Call> = []
    const send = () => {
      if (outbox.length === 0) return
      const calls = outbox
      outbox = []
      worker.postMessage({ _tag: "Run", calls } satisfies ToWorker)
    }

    // Shutdown (after the Gateway, whose calls have finished): the worker commits what it received,
    // closes its connection and ends; wait for that.
    yield* Effect.addFinalizer(() =>
      Effect.async<void>((resume) => {
        if (gone !== undefined) return resume(Effect.void)
        closing = true
        worker.once("exit", () => resume(Effect.void))
        worker.ref()
        send()
        worker.postMessage({ _tag: "Close" } satisfies ToWorker)
      })
    )

    let nextId = 0
    const run: Run = <E>(op: ChatOp, args: unknown) =>
      Effect.async<void, E>((resume) => {
        if (gone !== undefined || closing) return resume(Effect.die(gone ?? new Error("the store is closed (the gateway is shutting down)")))
        const id = nextId++
        pending.set(id, (outcome) => resume(outcomeEffect<void, E>(outcome)))
        if (outbox.length === 0) setImmediate(send)
        outbox.push({ id, op, args })
      }).pipe(Effect.uninterruptible)
    return run
  })

export class ChatStore extends Context.Tag("tollgate/ChatStore")<ChatStore, ChatStoreApi>() {
  static readonly Default: Layer.Layer<ChatStore, never, Settings | Sqlite | ReceiptSigner> = Layer.scoped(
    ChatStore,
    Effect.gen(function* () {
      const settings = yield* Settings
      const store = yield* Sqlite
      const signer = yield* ReceiptSigner
      const filename = sqliteFilename(settings.databaseUrl)
      const inWorker = settings.storeWorker && filename !== ":memory:"
      let run: Run
      if (inWorker) {
        run = yield* startWorker({ filename, signingKey: signer.signingKey, signingKeyId: signer.keyId })
      } else {
        const ops = makeChatTransactions(store.db, signer)
        run = <E>(op: ChatOp, args: unknown) =>
          store.transact<void, E>((abort) => (ops[op] as (a: unknown, abort: (e: E) => never) => void)(args, abort))
      }
      return {
        reserve: (args) => run<ReserveRefused>("reserve", args),
        settle: (args) => run("settle", args),
        abandon: (args) => run("abandon", args),
        extend: (args) => run("extend", args),
        runsIn: inWorker ? "worker" : "inline"
      }
    })
  )
}
