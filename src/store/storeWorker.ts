/**
 * The store worker: a thread that owns a write connection to the SQLite file and runs the governed
 * call's transactions (src/store/chatTransactions.ts) there, group-committed, with synchronous=FULL.
 * The statements, the commits' fsyncs and the receipt signatures leave the event loop, which keeps
 * the HTTP work, routing and pricing (src/store/ChatStore.ts).
 *
 * Protocol (MessagePort, structured clone): the main thread sends the calls of one event-loop turn
 * as one message `Run [{ id, op, args }, …]` (a lone call to an idle worker at once, decisions/0014);
 * the worker commits a message with those already waiting behind it, and answers each batch it
 * committed with one message `Done [{ id, outcome }, …]`. `Close` lets every transaction received before it commit and
 * reply, then closes the connection and ends the thread.
 */
import BetterSqlite3 from "better-sqlite3"
import type { KeyObject } from "node:crypto"
import { fdatasyncSync, openSync } from "node:fs"
import { parentPort, receiveMessageOnPort, workerData } from "node:worker_threads"
import { ed25519At } from "./ed25519Native.ts"
import { sealReceipt } from "../../spec/receipt.ts"
import { type ChatOp, makeChatTransactions, mustSync } from "./chatTransactions.ts"
import { makeGroupCommit, type TxOutcome } from "./syncTransactions.ts"

export interface StoreWorkerData {
  readonly filename: string
  readonly signingKey: KeyObject
  readonly signingKeyId: string
  /** The resolved `sodium-native` entry (src/store/sodium.ts): receipts are signed with libsodium when it loads here. */
  readonly sodium: string | undefined
  readonly assertInvariants: boolean
}

export interface Call {
  readonly id: number
  /** `sync`: put every transaction committed so far on disk (the WAL's fdatasync), then answer. */
  readonly op: ChatOp | "sync"
  readonly args: unknown
}
export type ToWorker = { readonly _tag: "Run"; readonly calls: ReadonlyArray<Call> } | { readonly _tag: "Close" }
/** TOLLGATE_TIMELINE=1 (src/domain/timeline.ts): where a transaction's time in the worker went, ms. */
export interface WorkerTiming {
  /** From the message's arrival to the transaction's first statement: the batch's start, its BEGIN. */
  readonly wait: number
  /** The transaction's statements, the receipt's signature included. */
  readonly body: number
  /** The receipt's signature alone. */
  readonly sign: number
  /** From the end of the statements to the reply: the COMMIT and its fsync. */
  readonly commit: number
}
export type FromWorker =
  | { readonly _tag: "Ready" }
  | { readonly _tag: "Done"; readonly replies: ReadonlyArray<{ readonly id: number; readonly outcome: TxOutcome; readonly timing?: WorkerTiming }> }

const port = parentPort!
const data = workerData as StoreWorkerData
const db = new BetterSqlite3(data.filename, { timeout: 5000 })
db.pragma("journal_mode = WAL")
db.pragma("synchronous = FULL")
db.pragma("foreign_keys = ON")
// A call of a group commit is its own savepoint, so each page it changes is first copied to the
// sub-journal: kept in memory, not in a temporary file (better-sqlite3 builds SQLite with TEMP_STORE=1,
// files unless asked). It only serves a rollback inside the transaction; the WAL is the durable copy.
db.pragma("temp_store = MEMORY")

// TOLLGATE_TIMELINE=1: each reply says where its transaction's time went (timed only then).
const timed = process.env.TOLLGATE_TIMELINE === "1"
let signMs = 0
// libsodium where it loads: the same signature as node:crypto's, in about half the CPU (docs/decisions/0030).
const sign = ed25519At(data.sodium).signerFor(data.signingKey)
const seal = (unsigned: Parameters<typeof sealReceipt>[1]) => {
  if (!timed) return sealReceipt(sign, unsigned)
  const t = performance.now()
  const sealed = sealReceipt(sign, unsigned)
  signMs += performance.now() - t
  return sealed
}
const ops = makeChatTransactions(db, { keyId: data.signingKeyId, seal }, { assertInvariants: data.assertInvariants })
// The replies of one batch are sent together, as soon as it committed: the callers of an unsynced
// batch hear back before the synced batch of the same turn has its fsync.
let replies: Array<{ id: number; outcome: TxOutcome; timing?: WorkerTiming }> = []
const flush = () => {
  if (replies.length === 0) return
  const batch = replies
  replies = []
  port.postMessage({ _tag: "Done", replies: batch } satisfies FromWorker)
}
const group = makeGroupCommit(db, { afterBatch: flush })

/** A defect crosses the thread as its message and stack: an Error's class does not survive the clone. */
const portable = (outcome: TxOutcome): TxOutcome =>
  outcome._tag === "Died" && outcome.defect instanceof Error
    ? { _tag: "Died", defect: { name: outcome.defect.name, message: outcome.defect.message } }
    : outcome

// Close after the transactions already received have committed (a close never cuts a batch).
const close = () => {
  db.close()
  port.close()
}

// The WAL, opened for `sync` when first asked: an fdatasync of it is what a COMMIT at synchronous=FULL
// does after writing its frames, so it makes every transaction committed before it durable.
let walFd: number | undefined
const syncWal = () => fdatasyncSync((walFd ??= openSync(`${data.filename}-wal`, "r")))

/**
 * A stream's reservation commits without its own fsync (at NORMAL, durable against a crash of the
 * process at once); the Gateway asks for `sync` next and waits for it before the stream's headers,
 * while the upstream opens (docs/decisions/0013). Queued unsynced, so it follows that reservation's
 * batch; the fdatasync runs once its batch committed, before the answer.
 */
const runSync = (id: number) =>
  group.submit(
    () => undefined,
    (outcome) => {
      try {
        if (outcome._tag === "Committed") syncWal()
        replies.push({ id, outcome })
      } catch (defect) {
        replies.push({ id, outcome: portable({ _tag: "Died", defect }) })
      }
    },
    false
  )

/** Whether a transaction waits for the disk in the worker: all as `mustSync` says, but a stream's reservation, which `sync` follows. */
const syncedHere = (op: ChatOp, args: unknown) => op !== "reserve" && mustSync(op, args)

const run = ({ id, op, args }: Call) => {
  if (op === "sync") return runSync(id)
  const body = (abort: (e: unknown) => never) => (ops[op] as (a: unknown, abort: (e: unknown) => never) => void)(args, abort)
  if (!timed) return group.submit(body, (outcome) => void replies.push({ id, outcome: portable(outcome) }), syncedHere(op, args))
  const received = performance.now()
  let started = received
  let ended = received
  let sign = 0
  group.submit(
    (abort) => {
      started = performance.now()
      signMs = 0
      try {
        return body(abort)
      } finally {
        ended = performance.now()
        sign = signMs
      }
    },
    (outcome) => {
      const timing = { wait: started - received, body: ended - started, sign, commit: performance.now() - ended }
      replies.push({ id, outcome: portable(outcome), timing })
    },
    syncedHere(op, args)
  )
}

const receive = (message: ToWorker) => {
  if (message._tag === "Close") group.submit(() => undefined, () => queueMicrotask(close))
  else for (const call of message.calls) run(call)
}

// A message, and every message already waiting behind it, make one batch, committed at once: the
// batch is as large as a turn's would be, without waiting the turn (the caller of a lone call was
// paying ≈ 0.1 ms for a setImmediate, bench/timeline.ts).
port.on("message", (message: ToWorker) => {
  receive(message)
  for (let next = receiveMessageOnPort(port); next !== undefined; next = receiveMessageOnPort(port)) receive(next.message as ToWorker)
  group.flush()
})

port.postMessage({ _tag: "Ready" } satisfies FromWorker)
