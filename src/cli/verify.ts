/**
 * `tollgate verify`: a customer's offline check of a receipt export (GET /v1/receipts, spec/export.ts)
 * with the rules of the package @tollgate/spec (spec/verify.ts): every signature, the chain, every
 * charge, the checkpoints and statements the customer kept. No database, no network: files in,
 * findings out, printed as `tollgate audit` prints its own.
 *
 *   tollgate verify <export.jsonl> [--checkpoints F] [--statement F]… [--keys F] [--rate-cards F] [--jobs N] [--json] [--limit N]
 *
 * The export is read as a stream (one line at a time, flat memory). Ed25519 checks use libsodium
 * (sodium-native) where it loads, else node:crypto: the same verdicts (spec/ed25519.ts), faster.
 *
 * Exit code: 0 no findings, 1 findings, 2 the check could not run.
 */
import { createReadStream, readFileSync, statSync } from "node:fs"
import { availableParallelism } from "node:os"
import { Worker } from "node:worker_threads"
import type { RateCard } from "../../spec/pricing.ts"
import { ExportReader, LineSplitter } from "../../spec/export.ts"
import { type ExportRecord } from "../../spec/export.ts"
import { makeVerifier, type SealVerdict, splitNotes, type TrustedKeyInput, type Verifier, type VerifyFinding, verifyFindingKinds, type VerifySummary } from "../../spec/verify.ts"
import type { SealJob } from "./verifyWorker.ts"
import { fastestEd25519 } from "../store/sodium.ts"
import { findingLines, oneFileCommand } from "./commandText.ts"
import { fastestCheckOfPem } from "./pemCheck.ts"

const usage = `usage: tollgate verify <export.jsonl> [--checkpoints F] [--statement F]… [--keys F] [--rate-cards F] [--json] [--limit N]
  <export.jsonl>   the receipt export (GET /v1/receipts, tollgate export), "-" for standard input
  --checkpoints    a file of signed checkpoints you kept (GET /v1/receipts/checkpoint answers, one after another)
  --statement      a statement you kept (GET /v1/statements/{period}); repeatable
  --keys           trust only these receipt keys (a GET /v1/receipts/keys answer); default: the export's
  --rate-cards     rate cards you hold (a GET /v1/rate_cards answer), besides those the export carries
  --jobs           signature worker threads (default: the available parallelism for an export of 8 MB
                   or more, else 0: this thread checks every signature)
  --limit          findings listed in detail (default 1000; all are counted)
exit code: 0 no findings, 1 findings, 2 the check could not run`

export interface VerifyInput {
  readonly exportStream: AsyncIterable<string>
  readonly checkpoints?: string | undefined
  readonly statements?: ReadonlyArray<string> | undefined
  readonly keys?: string | undefined
  readonly rateCards?: string | undefined
  readonly limit?: number | undefined
  /** Signature worker threads (0: this thread checks every signature). */
  readonly jobs?: number | undefined
}

export interface VerifyResult {
  readonly summary: VerifySummary
  readonly findings: ReadonlyArray<VerifyFinding>
  readonly omitted: number
  readonly durationMs: number
  /** This process's CPU time (user + system) over the same span: the rate's measure on a shared machine. */
  readonly cpuMs: number
  readonly receiptsPerSecond: number
  readonly ed25519: string
  readonly keySource: "pinned" | "export"
}

/** The list of a GET list answer ({data: […]}, as /v1/receipts/keys and /v1/rate_cards give), or a bare list. */
const listFile = <T>(text: string, what: string): ReadonlyArray<T> => {
  const v = JSON.parse(text) as unknown
  const list = Array.isArray(v) ? v : (v as { data?: unknown }).data
  if (!Array.isArray(list)) throw new Error(`the ${what} file is neither a list nor {data: [...]}`)
  return list as ReadonlyArray<T>
}

/** A statements file: one JSON statement, a list of them, or JSON Lines of them. */
export const parseStatementsFile = (text: string): Array<unknown> => {
  try {
    const v = JSON.parse(text) as unknown
    return Array.isArray(v) ? v : [v]
  } catch {
    return text.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as unknown)
  }
}

const statSize = (path: string): number => {
  try {
    return statSync(path).size
  } catch {
    return 0
  }
}

const BATCH = 256
/** Batches in flight before reading waits: what bounds memory. */
const IN_FLIGHT = 4

/**
 * Records fed to `verifier` in file order, each receipt's seal computed by one of `jobs` worker
 * threads (./verifyWorker.ts): the main thread's chain, Merkle and charge checks overlap the Ed25519
 * checks. A header is recorded only once every batch before it is, so a page's keys reach the
 * workers before its receipts.
 */
const sealPool = (jobs: number, verifier: Verifier) => {
  // The CLI runs its TypeScript through tsx (bin/tollgate.mjs); a worker registers tsx's loader too.
  const boot = `import(${JSON.stringify(import.meta.resolve("tsx/esm/api"))}).then((t) => { t.register(); return import(${JSON.stringify(new URL("./verifyWorker.ts", import.meta.url).href)}) })`
  const workers = Array.from({ length: jobs }, () => new Worker(boot, { eval: true }))
  const keysSent = workers.map(() => -1)
  const waiting = new Map<number, { resolve: (v: ReadonlyArray<SealVerdict>) => void; reject: (e: unknown) => void }>()
  for (const w of workers) {
    w.on("message", (m: { id: number; verdicts: ReadonlyArray<SealVerdict> }) => {
      waiting.get(m.id)?.resolve(m.verdicts)
      waiting.delete(m.id)
    })
    w.on("error", (e) => {
      for (const p of waiting.values()) p.reject(e)
      waiting.clear()
    })
  }
  const queue: Array<{ readonly records: ReadonlyArray<ExportRecord>; readonly verdicts: Promise<ReadonlyArray<SealVerdict>> }> = []
  let records: Array<ExportRecord> = []
  let lines: Array<string> = []
  let members: Array<string> = []
  let next = 0
  const flush = () => {
    if (records.length === 0) return
    const id = next++
    const at = id % workers.length
    const keys = verifier.trustedKeys()
    const job: SealJob = { id, lines, members, ...(keys.length === keysSent[at] ? {} : { keys }) }
    keysSent[at] = keys.length
    queue.push({ records, verdicts: new Promise((resolve, reject) => waiting.set(id, { resolve, reject })) })
    workers[at]!.postMessage(job)
    records = []
    lines = []
    members = []
  }
  const drain = async (max: number) => {
    if (max === 0) flush()
    while (queue.length > max) {
      const batch = queue.shift()!
      const verdicts = await batch.verdicts
      let i = 0
      for (const r of batch.records) verifier.record(r, r.kind === "receipt" ? verdicts[i++] : undefined)
    }
  }
  /** A promise only when the record must wait (a header, or a full batch with IN_FLIGHT ahead): no await a line otherwise. */
  const record = (r: ExportRecord): Promise<void> | undefined => {
    if (r.kind === "header") return drain(0).then(() => verifier.record(r))
    records.push(r)
    if (r.kind === "receipt") {
      lines.push(r.text)
      const { hash, signature, created_at, signing_key_id } = r.receipt
      members.push(hash, signature, created_at, signing_key_id) // SealJob.members, in its order
    }
    if (records.length < BATCH) return undefined
    flush()
    return queue.length > IN_FLIGHT ? drain(IN_FLIGHT) : undefined
  }
  const close = () => Promise.all(workers.map((w) => w.terminate()))
  return { record, drain, close }
}

/** Verify a stream of export text with the fastest Ed25519 of this process. */
export const verifyExport = async (input: VerifyInput): Promise<VerifyResult> => {
  const ed = fastestEd25519()
  const limit = input.limit ?? 1000
  const findings: Array<VerifyFinding> = []
  let omitted = 0
  const keys = input.keys === undefined ? undefined : listFile<TrustedKeyInput>(input.keys, "keys")
  const verifier = makeVerifier({
    report: (f) => (findings.length < limit ? findings.push(f) : omitted++),
    keys,
    checkpoints: input.checkpoints === undefined ? undefined : splitNotes(input.checkpoints),
    statements: input.statements?.flatMap(parseStatementsFile),
    rateCards: input.rateCards === undefined ? undefined : listFile<RateCard>(input.rateCards, "rate cards"),
    checkOfPem: fastestCheckOfPem
  })
  const started = performance.now()
  const cpu = process.cpuUsage()
  const reader = new ExportReader()
  const splitter = new LineSplitter()
  const jobs = input.jobs ?? 0
  if (jobs === 0) {
    for await (const chunk of input.exportStream) for (const line of splitter.push(chunk)) verifier.record(reader.read(line))
    for (const line of splitter.end()) verifier.record(reader.read(line))
  } else {
    const pool = sealPool(jobs, verifier)
    try {
      for await (const chunk of input.exportStream) {
        for (const line of splitter.push(chunk)) {
          const wait = pool.record(reader.read(line))
          if (wait !== undefined) await wait
        }
      }
      for (const line of splitter.end()) await pool.record(reader.read(line))
      await pool.drain(0)
    } finally {
      await pool.close()
    }
  }
  const summary = verifier.finish()
  const durationMs = performance.now() - started
  const used = process.cpuUsage(cpu)
  return {
    summary,
    findings,
    omitted,
    durationMs,
    cpuMs: (used.user + used.system) / 1000,
    receiptsPerSecond: Math.round(summary.receipts / Math.max(durationMs / 1000, 1e-9)),
    ed25519: `${ed.name}${jobs > 0 ? `, ${jobs} signature worker(s)` : ""}`,
    keySource: keys === undefined ? "export" : "pinned"
  }
}

export const renderHuman = (file: string, r: VerifyResult): string => {
  const s = r.summary
  const lines: Array<string> = []
  lines.push(`Tollgate verify of ${file}`)
  lines.push(`  scope:   ${s.project ?? "no project"}, ${s.period === null ? "the whole chain" : s.period === undefined ? "no header" : `period ${s.period}`}`)
  lines.push(
    `  checked: ${s.receipts} receipts in ${s.pages} page(s), ${s.keys} public key(s) (${r.keySource === "pinned" ? "pinned" : "from the export"}), ` +
      `${s.rateCards} rate card(s), ${s.checkpoints} checkpoint(s), ${s.statements} statement(s)`
  )
  lines.push(`  time:    ${(r.durationMs / 1000).toFixed(2)} s, ${(r.cpuMs / 1000).toFixed(2)} s of CPU (${r.receiptsPerSecond} receipts/s, Ed25519 by ${r.ed25519})`)
  for (const n of s.notes) lines.push(`  note:    ${n}`)
  lines.push(...findingLines({ count: s.findings, byKind: s.byKind, kinds: verifyFindingKinds, listed: r.findings, omitted: r.omitted }))
  return lines.join("\n")
}

export const verifyCommand = async (argv: ReadonlyArray<string>): Promise<number> => {
  const parsed = oneFileCommand(
    argv,
    { checkpoints: { type: "string" }, statement: { type: "string", multiple: true }, keys: { type: "string" }, "rate-cards": { type: "string" }, jobs: { type: "string" }, json: { type: "boolean" }, limit: { type: "string" } },
    usage
  )
  if (typeof parsed === "number") return parsed
  const { values, file } = parsed
  const limit = values.limit === undefined ? 1000 : Number(values.limit)
  if (!Number.isSafeInteger(limit) || limit < 0) {
    process.stderr.write(`--limit must be a non-negative integer\n${usage}\n`)
    return 2
  }
  const jobs = values.jobs === undefined ? (file !== "-" && statSize(file) >= 8_000_000 ? availableParallelism() : 0) : Number(values.jobs)
  if (!Number.isSafeInteger(jobs) || jobs < 0) {
    process.stderr.write(`--jobs must be a non-negative integer\n${usage}\n`)
    return 2
  }
  try {
    const read = (path: string | undefined) => (path === undefined ? undefined : readFileSync(path, "utf8"))
    const stream = (file === "-" ? process.stdin : createReadStream(file)).setEncoding("utf8") as AsyncIterable<string>
    const result = await verifyExport({
      exportStream: stream,
      checkpoints: read(values.checkpoints),
      statements: values.statement?.map((p) => read(p)!),
      keys: read(values.keys),
      rateCards: read(values["rate-cards"]),
      jobs,
      limit
    })
    if (values.json === true) {
      process.stdout.write(`${JSON.stringify({ ...result.summary, findings_listed: result.findings, omitted: result.omitted, duration_ms: Math.round(result.durationMs), cpu_ms: Math.round(result.cpuMs), ed25519: result.ed25519 })}\n`)
    } else {
      process.stdout.write(`${renderHuman(file, result)}\n`)
    }
    return result.summary.clean ? 0 : 1
  } catch (e) {
    process.stderr.write(`tollgate verify: ${(e as Error).message}\n`)
    return 2
  }
}
