/**
 * The store reader of `tollgate audit` (src/cli/audit.ts is the command): checks a store against the
 * rulebook (spec/audit.ts) and returns the summary and the findings.
 *
 * The store is read through the audit port (src/store/auditSource.ts): one snapshot, rows streamed in
 * batches, on SQLite (src/store/auditSqlite.ts) or PostgreSQL (src/store/auditPg.ts); the checker
 * does not know which. Receipts go in batches to `jobs` signature workers (src/store/auditPool.ts),
 * which answer each receipt's facts (spec/audit/facts.ts: seal, columns against body, the signed
 * numbers the ordered checks need); the main thread feeds each batch to the checker in chain order
 * with its facts, so chain, charge and window checks stay ordered and the findings are the
 * same whatever `jobs` is. At most 2 × jobs batches are outstanding: reading waits for the workers,
 * and memory stays flat whatever the number of receipts.
 */
import type { EndUserDefaultRow, ScopeCapRow, ScopeHoldsRow, ScopeWindowRow } from "../../spec/audit/scopeWindows.ts"
import { availableParallelism } from "node:os"
import {
  type AuditScope,
  type AuditSummary,
  type BatchFacts,
  type Finding,
  type KeyRow,
  makeAuditor,
  nodeEd25519,
  type ReceiptRow,
  receiptKeyId,
  packColumns
} from "../../spec/audit.ts"
import { isPeriod } from "../../spec/ledger.ts"
import { GENESIS_HASH } from "../../spec/receipt.ts"
import { isPostgresUrl, sqliteFilename } from "../domain/databaseUrl.ts"
import { openPgAudit } from "./auditPg.ts"
import { startSealPool, type SealPool, workerCode } from "./auditPool.ts"
import { ed25519At, sodiumModule } from "./sodium.ts"
import {
  allRows,
  auditQueries,
  type AuditQuery,
  type AuditSource,
  type ChainRange,
  nest,
  rows,
  type ChainHeadRow,
  type HeldReservationRow,
  type IdempotencyRow,
  type ProjectRow,
  type RateCardRow,
  type UnreceiptedRow,
  type WindowRow
} from "./auditSource.ts"
import { openSqliteAudit } from "./auditSqlite.ts"

export interface AuditOptions {
  /** DATABASE_URL form (`sqlite:<path>`, `postgres://…`) or a plain path to the SQLite file. */
  readonly database: string
  readonly project?: string | undefined
  readonly period?: string | undefined
  /** Trust only these public keys (PEM text) instead of the store's receipt_keys table. */
  readonly publicKeys?: ReadonlyArray<string> | undefined
  /** Keep at most this many findings in detail (all are counted). Default 1000. */
  readonly limit?: number | undefined
  /** Signature worker threads; 0 verifies in this thread. Default: the available parallelism. */
  readonly jobs?: number | undefined
  /**
   * Which Ed25519 implementation checks the signatures (spec/ed25519.ts): libsodium where its
   * binding loads (the default), or node:crypto. The findings are the same either way.
   */
  readonly ed25519?: "libsodium" | "node:crypto" | undefined
  /** Receipts per batch read and sent to a worker. Default 500. */
  readonly batch?: number | undefined
  readonly onFinding?: ((finding: Finding) => void) | undefined
  /** Called about once a second while receipts stream by. */
  readonly onProgress?: ((progress: { readonly receipts: number; readonly total: number; readonly elapsedMs: number }) => void) | undefined
}

export interface AuditResult {
  readonly database: string
  readonly engine: "sqlite" | "postgres"
  readonly scope: AuditScope
  readonly summary: AuditSummary
  /** The first `limit` findings, in the order found. */
  readonly findings: ReadonlyArray<Finding>
  readonly omitted: number
  readonly durationMs: number
  readonly receiptsPerSecond: number
  readonly keySource: "store" | "pinned"
  readonly jobs: number
  /** The Ed25519 implementation that checked the signatures. */
  readonly ed25519: string
}

/** The SQLite file to audit: a DATABASE_URL (`sqlite:<path>`) or a plain path. */
export const databaseFile = (database: string): string => {
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(database) && !database.startsWith("sqlite:")) {
    throw new Error(`tollgate audit reads SQLite (sqlite:<path>) and PostgreSQL (postgres://…) stores; got ${database.split(":")[0]}:…`)
  }
  const path = database.startsWith("sqlite:") ? sqliteFilename(database) : database
  if (path === ":memory:") throw new Error("an in-memory store cannot be audited from outside the gateway")
  return path
}

/** Open the store's snapshot through the port, by its URL. */
export const openAuditSource = async (database: string): Promise<{ readonly source: AuditSource; readonly engine: "sqlite" | "postgres" }> =>
  isPostgresUrl(database) ? { source: await openPgAudit(database), engine: "postgres" } : { source: openSqliteAudit(databaseFile(database)), engine: "sqlite" }

/** Audit one store. Rejects when the store cannot be read. */
export const auditStore = async (options: AuditOptions): Promise<AuditResult> => {
  if (options.period !== undefined && !isPeriod(options.period)) throw new Error(`--period must be YYYY-MM (got ${options.period})`)
  const jobs = options.jobs ?? availableParallelism()
  if (!Number.isSafeInteger(jobs) || jobs < 0) throw new Error(`--jobs must be a non-negative integer (got ${jobs})`)
  const batch = options.batch ?? 500
  const sodium = options.ed25519 === "node:crypto" ? undefined : sodiumModule()
  const ed25519 = ed25519At(sodium)
  const { source, engine } = await openAuditSource(options.database)
  let pool: SealPool | undefined
  try {
    const scope: AuditScope = { project: options.project, period: options.period }
    const limit = options.limit ?? 1000
    const kept: Array<Finding> = []
    let omitted = 0
    const auditor = makeAuditor((f) => {
      options.onFinding?.(f)
      if (kept.length < limit) kept.push(f)
      else omitted++
    }, scope, ed25519)
    const Q = auditQueries(scope)
    const started = performance.now()

    // ---- context: small tables
    const pinned = options.publicKeys
    auditor.keys(
      pinned !== undefined && pinned.length > 0
        ? pinned.map((pem): KeyRow => ({ id: safeKeyId(pem), public_key: pem, retired_at: null }))
        : await allRows<KeyRow>(source, Q.keys)
    )
    auditor.rateCards(await allRows<RateCardRow>(source, Q.rateCards))
    auditor.projects(await allRows<ProjectRow>(source, Q.projects))
    for await (const w of rows<WindowRow>(source, Q.windows)) auditor.windows([w])
    auditor.scopeCaps(await allRows<ScopeCapRow>(source, Q.scopeCaps), await allRows<EndUserDefaultRow>(source, Q.endUserDefaults))
    for await (const w of rows<ScopeWindowRow>(source, Q.scopeWindows)) auditor.scopeWindows([w])
    for await (const h of rows<ScopeHoldsRow>(source, Q.scopeHolds)) auditor.scopeHolds([h])
    if (scope.period === undefined) for await (const h of rows<ChainHeadRow>(source, Q.chainHeads)) auditor.chainHeads([h])

    // ---- receipts, in settlement order per project, their seals checked by the workers
    const total = (await allRows<{ n: number }>(source, Q.receiptCount))[0]?.n ?? 0
    if (jobs > 0 && total > 0) pool = startSealPool(Math.min(jobs, Math.ceil(total / batch)), { keys: auditor.trustedKeys(), sodium: ed25519 === nodeEd25519 ? undefined : sodium }, await workerCode())
    const facts = pool?.facts
    let seen = 0
    let lastTick = started
    // Steps run in the order queued; a batch's step is ready when its verdicts are back.
    const queue: Array<Promise<() => void>> = []
    const outstanding = Math.max(2, 2 * jobs)
    const runNext = async () => (await queue.shift()!)()
    const enqueue = async (step: Promise<() => void>) => {
      step.catch(() => undefined) // awaited in order below; not an unhandled rejection meanwhile
      queue.push(step)
      while (queue.length > outstanding) await runNext()
    }
    const feed = (batchRows: ReadonlyArray<ReceiptRow>, known: BatchFacts | undefined) => {
      for (let i = 0; i < batchRows.length; i++) {
        if (known === undefined) auditor.receipt(batchRows[i]!)
        else auditor.receiptWithFacts(batchRows[i]!, known, i)
        if ((++seen & 1023) === 0 && options.onProgress !== undefined) {
          const now = performance.now()
          if (now - lastTick >= 1000) {
            lastTick = now
            options.onProgress({ receipts: seen, total, elapsedMs: now - started })
          }
        }
      }
    }
    const walk = async (q: AuditQuery) => {
      for await (const flat of source.arrays(q.sql, q.params, batch)) {
        const receiptRows = flat.map(nest)
        await enqueue(
          facts === undefined
            ? Promise.resolve(() => feed(receiptRows, undefined))
            : facts(packColumns(receiptRows)).then((known) => () => feed(receiptRows, known))
        )
      }
    }
    if (scope.period === undefined) {
      await walk(Q.receipts)
    } else {
      const ranges = await allRows<ChainRange>(source, Q.chainRanges)
      for (const range of ranges) {
        const prev = range.lo <= 1 ? GENESIS_HASH : (await allRows<{ hash: string }>(source, Q.hashAt(range.project_id, range.lo - 1)))[0]?.hash
        await enqueue(Promise.resolve(() => auditor.chainStart(range.project_id, range.lo, prev)))
        await walk(Q.walk(range))
      }
    }
    while (queue.length > 0) await runNext()

    // ---- reservations still held, requests settled without a receipt, idempotency records
    for await (const row of rows<HeldReservationRow>(source, Q.held)) auditor.heldReservation(row)
    for await (const row of rows<UnreceiptedRow>(source, Q.unreceipted)) auditor.unreceipted(row)
    for await (const row of rows<IdempotencyRow>(source, Q.idempotency)) auditor.idempotency(row)

    const summary = auditor.finish()
    const durationMs = performance.now() - started
    return {
      database: source.label,
      engine,
      scope,
      summary,
      findings: kept,
      omitted,
      durationMs,
      receiptsPerSecond: durationMs > 0 ? Math.round((summary.stats.receipts * 1000) / durationMs) : 0,
      keySource: pinned !== undefined && pinned.length > 0 ? "pinned" : "store",
      jobs,
      ed25519: ed25519.name
    }
  } finally {
    await pool?.close()
    await source.close()
  }
}

/** A pinned key's id; an unreadable PEM gets an id the checker will reject as invalid. */
const safeKeyId = (pem: string): string => {
  try {
    return receiptKeyId(pem)
  } catch {
    return "rk_unreadable"
  }
}
