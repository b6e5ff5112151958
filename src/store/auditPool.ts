/**
 * The audit's signature workers (src/store/auditWorker.ts): `jobs` threads, each given the trusted
 * keys once, then batches: receipt bodies (`seal`: one verdict byte per receipt) or rows' signed
 * columns packed (`facts`: spec/audit/facts.ts, eight numbers per receipt). A batch goes to the worker
 * with the fewest batches outstanding; its answer comes back in a transferred typed array. The caller
 * keeps the order (it awaits batches in the order it sent them) and the backpressure (how many it
 * lets be outstanding).
 *
 * The worker's code: src/store/auditWorker.ts bundled once per process with esbuild (a few spec/
 * modules, ≈ 10 kB of CommonJS) and started from that text, so no worker carries a TypeScript loader;
 * where the sources are not at hand (a bundled build), auditWorker.mjs beside this module, which
 * loads them through tsx as the store worker does.
 */
import { existsSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { Worker } from "node:worker_threads"
import type { BatchFacts, ColumnBatch } from "../../spec/audit.ts"
import type { AuditWorkerData, SealCodes, SealReply, SealRequest } from "./auditWorker.ts"

export interface SealPool {
  /** The seal verdicts of `bodies`, in their order. */
  readonly seal: (bodies: ReadonlyArray<string>) => Promise<SealCodes>
  /** The facts (spec/audit/facts.ts) of rows given by their signed columns, in their order. */
  readonly facts: (rows: ColumnBatch) => Promise<BatchFacts>
  readonly close: () => Promise<void>
}

/** A batch awaiting its answer, by what it asked for: seal verdicts or facts. */
type Pending =
  | { readonly kind: "codes"; readonly resolve: (codes: SealCodes) => void; readonly reject: (e: Error) => void }
  | { readonly kind: "facts"; readonly resolve: (facts: BatchFacts) => void; readonly reject: (e: Error) => void }

interface Live {
  readonly worker: Worker
  readonly pending: Map<number, Pending>
  failed: Error | undefined
}

/** What a worker runs: the bundled code (`eval`), or a module to load. */
export type WorkerCode = { readonly eval: string } | { readonly url: URL }

let bundled: Promise<WorkerCode> | undefined

/** The worker's code, bundled from its sources on first use (cached for the process). */
export const workerCode = (): Promise<WorkerCode> =>
  (bundled ??= (async (): Promise<WorkerCode> => {
    const source = fileURLToPath(new URL("./auditWorker.ts", import.meta.url))
    const fallback = { url: new URL("./auditWorker.mjs", import.meta.url) }
    if (!existsSync(source)) return fallback
    try {
      const { build } = await import("esbuild")
      const out = await build({ entryPoints: [source], bundle: true, write: false, platform: "node", format: "cjs", target: "node20", logLevel: "silent" })
      return { eval: out.outputFiles[0]!.text }
    } catch {
      return fallback
    }
  })())

export const startSealPool = (jobs: number, workerData: AuditWorkerData, code: WorkerCode): SealPool => {
  let nextId = 0
  const lives: Array<Live> = []
  for (let i = 0; i < jobs; i++) {
    const worker =
      "eval" in code ? new Worker(code.eval, { eval: true, workerData, execArgv: [] }) : new Worker(code.url, { workerData, execArgv: [] })
    const live: Live = { worker, pending: new Map(), failed: undefined }
    const fail = (e: Error) => {
      live.failed ??= e
      for (const p of live.pending.values()) p.reject(e)
      live.pending.clear()
    }
    live.worker.on("message", (reply: SealReply) => {
      const p = live.pending.get(reply.id)
      live.pending.delete(reply.id)
      if (p === undefined) return
      if ("codes" in reply && p.kind === "codes") p.resolve(reply.codes)
      else if ("facts" in reply && p.kind === "facts") p.resolve(reply.facts)
      else p.reject(new Error(`audit worker: batch ${reply.id} answered with the wrong kind`))
    })
    live.worker.on("error", (e) => fail(new Error(`audit worker: ${e.message}`)))
    live.worker.on("exit", (code) => fail(new Error(`audit worker exited (code ${code})`)))
    lives.push(live)
  }
  const send = (pending: Pending, request: (id: number) => SealRequest, transfer: ReadonlyArray<ArrayBuffer> = []) => {
    let live = lives[0]!
    for (const l of lives) if (l.pending.size < live.pending.size) live = l
    if (live.failed !== undefined) return pending.reject(live.failed)
    const id = ++nextId
    live.pending.set(id, pending)
    live.worker.postMessage(request(id), transfer)
  }
  const seal = (bodies: ReadonlyArray<string>) =>
    new Promise<SealCodes>((resolve, reject) => send({ kind: "codes", resolve, reject }, (id) => ({ id, bodies })))
  const facts = (rows: ColumnBatch) =>
    new Promise<BatchFacts>((resolve, reject) =>
      send({ kind: "facts", resolve, reject }, (id) => ({ id, rows }), [rows.ends.buffer as ArrayBuffer, rows.numbers.buffer as ArrayBuffer])
    )
  const close = async () => {
    await Promise.all(lives.map((l) => l.worker.terminate()))
  }
  return { seal, facts, close }
}
