/**
 * The customer's view of the receipts (issue 43, DESIGN §11): the per-project Merkle log with its
 * signed checkpoints and proofs, the receipt export, and the monthly statements.
 *
 * Off the governed call path: a call writes its receipt as before and nothing else. A background
 * fiber (every TOLLGATE_CHECKPOINT_INTERVAL_MS, default 30 s; 0 turns it off) reads the receipts
 * already committed past each project's log, appends their leaves to the project's right frontier it
 * keeps in memory, stores the complete subtrees they finish (src/store/receiptLogTree.ts), and signs
 * a checkpoint of the new size, whose root is the frontier folded, with the receipt key; it also
 * makes the statements of the month that closed. Everything it writes is keyed by (project, tree
 * size | node | period) and inserted with ON CONFLICT DO NOTHING, the log size only ever grows: with
 * several instances racing, the nodes they write are the same bytes, and the first checkpoint of a
 * size and the first statement of a period stored are the ones every instance serves.
 *
 * A period closes CLOSE_GRACE_MS after its last instant, once no reservation of it is held: after
 * that no receipt of it can be written (a hold of the period is made within milliseconds of its
 * request's start, and a held one ends in a receipt or a void).
 */
import { Chunk, Clock, Config, Duration, Effect, Option, Schedule, Stream } from "effect"
import { sign } from "node:crypto"
import { noteSignerOfKey, originOf, signCheckpoint } from "../../spec/checkpoint.ts"
import { headerLine } from "../../spec/export.ts"
import { Pricing } from "./Pricing.ts"
import { isPeriod, periodBounds, periodOf } from "../../spec/ledger.ts"
import { receiptLeafHash } from "../../spec/merkle.ts"
import { type ModelTotals, type Statement, statementSignedBytes, type UnsignedStatement } from "../../spec/statement.ts"
import { AdminNotFound, InvalidRequest, RequestNotFound } from "../domain/errors.ts"
import { type CheckpointRow, ReceiptLogRepo } from "../store/receiptLogRepo.ts"
import {
  appendLeaves,
  consistencyPath,
  type Frontier,
  frontierOf,
  frontierRoot,
  inclusionPath,
  nodeId,
  type Oracle,
  plan,
  rootOf,
  runs
} from "../store/receiptLogTree.ts"
import { ReceiptSigner } from "./ReceiptSigner.ts"

/** A period closes this long after its last instant (and once nothing of it is held). */
export const CLOSE_GRACE_MS = 60_000
/**
 * Leaves added to a log in one transaction. On SQLite the round runs on the main thread's connection,
 * synchronously: a step reads the receipts' hashes (one statement), hashes ≈ 2 a receipt on the kept
 * frontier, and commits the nodes — ≈ 7 µs a receipt (bench/receiptLogRound.ts), so a step of 2,048
 * is ≈ 15 ms of the event loop, and the round yields between steps so waiting calls run. Larger steps,
 * fewer commits (each an fsync on this connection).
 */
const EXTEND_STEP = 2048
/** Receipts read from the store at a time while an export page streams. */
const EXPORT_CHUNK = 500
export const EXPORT_DEFAULT_LIMIT = 1000
export const EXPORT_MAX_LIMIT = 100_000

const toHex = (b: Uint8Array): string => Buffer.from(b).toString("hex")
const fromHex = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, "hex"))
export const toBase64 = (b: Uint8Array): string => Buffer.from(b).toString("base64")

const previousPeriod = (period: string): string => periodOf(periodBounds(period).startMillis - 1)

/** A size from a query parameter: a decimal safe integer, or a 400 naming the parameter. */
const sizeParam = (value: string | undefined, param: string): Effect.Effect<number, InvalidRequest> => {
  if (value === undefined) return new InvalidRequest({ message: `${param} is required: a tree size, a whole number.`, param })
  return /^(0|[1-9][0-9]{0,14})$/.test(value) ? Effect.succeed(Number(value)) : new InvalidRequest({ message: `${param} must be a whole number (a tree size).`, param })
}

export interface ExportPage {
  readonly nextCursor: string | null
  /** The page's JSON Lines: its header, then its receipts as stored, read EXPORT_CHUNK at a time. */
  readonly body: Stream.Stream<Uint8Array>
}

export class ReceiptLog extends Effect.Service<ReceiptLog>()("tollgate/ReceiptLog", {
  scoped: Effect.gen(function* () {
    const repo = yield* ReceiptLogRepo
    const signer = yield* ReceiptSigner
    const pricing = yield* Pricing
    const noteSigner = noteSignerOfKey(signer.keyId, signer.signingKey)
    const interval = yield* Config.integer("TOLLGATE_CHECKPOINT_INTERVAL_MS").pipe(Config.withDefault(30_000), Effect.orDie)

    /** Run `compute` on the stored nodes and receipt hashes it needs, each kind fetched in one read. */
    const withTree = <A>(projectId: string, compute: (o: Oracle) => A) =>
      Effect.gen(function* () {
        const p = plan(compute)
        const nodes = new Map<number, Uint8Array>()
        for (const r of yield* repo.nodes(projectId, p.nodes)) nodes.set(r.node, fromHex(r.hash))
        const leaves = new Map<number, Uint8Array>()
        for (const [lo, hi] of runs(p.leaves)) for (const r of yield* repo.leafHashes(projectId, lo, hi)) leaves.set(r.seq - 1, receiptLeafHash(r.hash))
        return compute({
          node: (level, index) => nodes.get(nodeId(level, index)) ?? missing(`node ${level}/${index} of ${projectId}`),
          leaf: (i) => leaves.get(i) ?? missing(`receipt seq ${i + 1} of ${projectId}`)
        })
      }).pipe(Effect.orDie)

    const missing = (what: string): never => {
      throw new Error(`the receipt log lacks ${what}`)
    }

    /**
     * Each project's frontier as the last round left it (src/store/receiptLogTree.ts `Frontier`): a
     * round that finds the log at that size goes on from it with no node read, and its checkpoint's
     * root is the frontier folded. Any other size (the first round, another instance grew the log) is
     * read from the store: O(log n) nodes and fewer than 16 leaves. A few dozen hashes a project.
     */
    const frontiers = new Map<string, Frontier>()

    const frontierAt = (projectId: string, size: number) => {
      const kept = frontiers.get(projectId)
      return kept !== undefined && kept.size === size ? Effect.succeed(kept) : withTree(projectId, (o) => frontierOf(o, size))
    }

    /**
     * Extend a project's log to cover its receipts up to `target` (or as far as they are contiguous):
     * per step one read of the new receipts' hashes, their leaves appended to the frontier, and one
     * transaction storing the nodes they complete with the log's new size.
     */
    const extendLog = (projectId: string, target: number) =>
      Effect.gen(function* () {
        let f = yield* frontierAt(projectId, yield* repo.size(projectId))
        while (f.size < target) {
          const rows = yield* repo.leafHashes(projectId, f.size, Math.min(target, f.size + EXTEND_STEP))
          let n = 0
          while (n < rows.length && rows[n]!.seq === f.size + n + 1) n++
          if (n === 0) break
          const leaves = new Array<Uint8Array>(n)
          for (let i = 0; i < n; i++) leaves[i] = receiptLeafHash(rows[i]!.hash)
          const { frontier, completed } = appendLeaves(f, leaves)
          const written = completed.map((c) => ({ node: nodeId(c.level, c.index), hash: toHex(c.hash) }))
          yield* repo.withTransaction(Effect.zipRight(repo.insertNodes(projectId, written), repo.grow(projectId, frontier.size)))
          f = frontier
          frontiers.set(projectId, f)
          yield* Effect.yieldNow()
        }
        frontiers.set(projectId, f)
        return f
      }).pipe(Effect.orDie)

    const extend = (projectId: string, target: number) => Effect.map(extendLog(projectId, target), (f) => f.size)

    /** The root of the log's first `size` leaves: the kept frontier's when it is of that size, else from the store. */
    const rootAt = (projectId: string, size: number) => {
      const kept = frontiers.get(projectId)
      return kept !== undefined && kept.size === size ? Effect.succeed(frontierRoot(kept)) : withTree(projectId, (o) => rootOf(o, size))
    }

    /**
     * The checkpoint of the log's first `size` leaves: signed and offered to the store, which keeps the
     * first one of a size (ON CONFLICT DO NOTHING), then read back, so whoever asks gets the stored one
     * (no check first: one path, the one a race between instances takes).
     */
    const checkpointOf = (projectId: string, size: number) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const root = yield* rootAt(projectId, size)
        const note = signCheckpoint({ origin: originOf(projectId), treeSize: size, rootHash: root, extensions: [`time ${new Date(now).toISOString()}`] }, [noteSigner])
        yield* repo.insertCheckpoint(projectId, { tree_size: size, root: toBase64(root), note, created_at: now })
        return (yield* repo.checkpointAt(projectId, size))!
      }).pipe(Effect.orDie)

    /** Extend every project's log that is behind its chain and sign a checkpoint of its new size. */
    const extendAll = Effect.gen(function* () {
      for (const b of yield* repo.behind().pipe(Effect.orDie)) {
        const size = yield* extend(b.project_id, b.head)
        const latest = yield* repo.latestCheckpoint(b.project_id).pipe(Effect.orDie)
        if (latest === undefined || latest.tree_size < size) yield* checkpointOf(b.project_id, size)
      }
    })

    const isClosed = (projectId: string, period: string) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        if (now < periodBounds(period).endMillis + CLOSE_GRACE_MS) return false
        return (yield* repo.heldIn(projectId, period).pipe(Effect.orDie)) === 0
      })

    const parseStatement = (body: string): Statement => JSON.parse(body) as Statement

    /**
     * The period's statement: the stored one, or made now if the period has closed; else why there is
     * none — the period is still open (or the project unknown), or it ended before the project existed
     * (nothing to state, and a cap it never had).
     */
    const statementOrWhy = (projectId: string, period: string): Effect.Effect<Statement | "open" | "before_project"> =>
      Effect.gen(function* () {
        const stored = yield* repo.statement(projectId, period).pipe(Effect.orDie)
        if (stored !== undefined) return parseStatement(stored)
        const window = yield* repo.window(projectId, period).pipe(Effect.orDie)
        if (window === undefined) return "open"
        if (periodBounds(period).endMillis <= Number(window.created_at)) return "before_project"
        if (!(yield* isClosed(projectId, period))) return "open"
        const size = yield* extend(projectId, yield* repo.head(projectId).pipe(Effect.orDie))
        const checkpoint = yield* checkpointOf(projectId, size)
        const sums = yield* repo.routeSums(projectId, period).pipe(Effect.orDie)
        const by_model: Record<string, ModelTotals> = {}
        for (const s of sums) {
          by_model[s.route] = {
            requests: s.requests,
            tokens: { input: s.input_tokens, cached_input: s.cached_input_tokens, output: s.output_tokens, reasoning: s.reasoning_tokens },
            credits: s.credits
          }
        }
        const now = yield* Clock.currentTimeMillis
        const unsigned: UnsignedStatement = {
          object: "statement",
          version: 1,
          project_id: projectId,
          period,
          cap: window.cap,
          spent: window.spent ?? 0,
          receipt_count: sums.reduce((n, s) => n + s.requests, 0),
          by_model,
          rate_card_versions: yield* repo.rateCardVersions(projectId, period).pipe(Effect.orDie),
          checkpoint: checkpoint.note,
          closed_at: new Date(now).toISOString(),
          signing_key_id: signer.keyId
        }
        const signature = sign(null, statementSignedBytes(unsigned), signer.signingKey).toString("base64url")
        yield* repo.insertStatement(projectId, period, JSON.stringify({ ...unsigned, signature }), now).pipe(Effect.orDie)
        return parseStatement((yield* repo.statement(projectId, period).pipe(Effect.orDie))!)
      })

    /** The period's statement, stored or made now; undefined while there is none (`statementOrWhy`). */
    const statementOf = (projectId: string, period: string) =>
      Effect.map(statementOrWhy(projectId, period), (found) => (typeof found === "string" ? undefined : found))

    /** The statements of the month before now's, for every project that had a window in it. */
    const closePeriods = Effect.gen(function* () {
      const period = previousPeriod(periodOf(yield* Clock.currentTimeMillis))
      for (const { project_id } of yield* repo.withoutStatement(period).pipe(Effect.orDie)) yield* statementOf(project_id, period)
    })

    /** One round of the background work. */
    const tick = Effect.zipRight(extendAll, closePeriods)

    if (interval > 0) {
      yield* Effect.forkScoped(
        Effect.repeat(
          Effect.delay(tick.pipe(Effect.catchAllCause((cause) => Effect.logWarning("receipt log: a round failed; the next one retries", cause))), Duration.millis(interval)),
          Schedule.forever
        )
      )
    }

    // ---- what the endpoints serve ----

    const checkpoint = (projectId: string, treeSize: string | undefined): Effect.Effect<CheckpointRow, InvalidRequest | AdminNotFound> =>
      Effect.gen(function* () {
        if (treeSize === undefined) {
          const latest = yield* repo.latestCheckpoint(projectId).pipe(Effect.orDie)
          if (latest === undefined) return yield* new AdminNotFound({ message: "This project's log has no checkpoint yet: one is signed within a checkpoint interval of its first receipt." })
          return latest
        }
        const size = yield* sizeParam(treeSize, "tree_size")
        const found = yield* repo.checkpointAt(projectId, size).pipe(Effect.orDie)
        if (found === undefined) return yield* new AdminNotFound({ message: `No checkpoint of tree size ${size} was signed for this project.` })
        return found
      })

    /** The log's size, or a 400 when `size` is beyond it. */
    const withinLog = (projectId: string, size: number, param: string) =>
      Effect.flatMap(repo.size(projectId).pipe(Effect.orDie), (logSize) =>
        size > logSize ? new InvalidRequest({ message: `${param} ${size} is beyond the log, which holds ${logSize} receipts so far.`, param }) : Effect.succeed(logSize)
      )

    const inclusion = (scope: { readonly projectId: string; readonly environment: string }, requestId: string, treeSizeParam: string | undefined) =>
      Effect.gen(function* () {
        const treeSize = yield* sizeParam(treeSizeParam, "tree_size")
        const seq = yield* repo.seqOfRequest(scope.projectId, scope.environment, requestId).pipe(Effect.orDie)
        if (seq === undefined) return yield* new RequestNotFound({ message: `No receipt for request ${requestId} in this project and environment.` })
        yield* withinLog(scope.projectId, treeSize, "tree_size")
        if (seq > treeSize) return yield* new InvalidRequest({ message: `The receipt is leaf ${seq - 1}, not in the tree of size ${treeSize}.`, param: "tree_size" })
        const hashes = yield* withTree(scope.projectId, (o) => inclusionPath(o, seq - 1, 0, treeSize))
        return { object: "inclusion_proof" as const, leaf_index: seq - 1, tree_size: treeSize, hashes: hashes.map(toBase64) }
      })

    const consistency = (projectId: string, fromParam: string | undefined, toParam: string | undefined) =>
      Effect.gen(function* () {
        const from = yield* sizeParam(fromParam, "from")
        const to = yield* sizeParam(toParam, "to")
        if (from > to) return yield* new InvalidRequest({ message: `from (${from}) must not be larger than to (${to}).`, param: "from" })
        yield* withinLog(projectId, to, "to")
        const hashes = yield* withTree(projectId, (o) => consistencyPath(o, from, to))
        return { object: "consistency_proof" as const, from, to, hashes: hashes.map(toBase64) }
      })

    const statement = (projectId: string, period: string) =>
      Effect.gen(function* () {
        if (!isPeriod(period)) return yield* new InvalidRequest({ message: "period must be a month written YYYY-MM.", param: "period" })
        const found = yield* statementOrWhy(projectId, period)
        if (found === "before_project") return yield* new AdminNotFound({ message: `The project did not exist in ${period}: there is no statement of it.` })
        if (found === "open") {
          return yield* new AdminNotFound({
            message: `The period ${period} has not closed yet: its statement is made once it has (after the month ends and nothing of it is still held).`
          })
        }
        return found
      })

    /**
     * One page of the export. A cursor is `<first seq>-<last seq>`: the chain range still to read
     * (fixed by the first page, so a walk is a snapshot of the chain as it was then); a page reads at
     * most `limit` seqs of it, so a page filtered by period may hold fewer than `limit` receipts and
     * still have a next cursor.
     */
    const exportPage = (projectId: string, q: { readonly period?: string | undefined; readonly cursor?: string | undefined; readonly limit?: string | undefined }) =>
      Effect.gen(function* () {
        if (!(yield* repo.projectExists(projectId).pipe(Effect.orDie))) return yield* new AdminNotFound({ message: `No project ${projectId}.` })
        const period = q.period ?? null
        if (period !== null && !isPeriod(period)) return yield* new InvalidRequest({ message: "period must be a month written YYYY-MM.", param: "period" })
        const limit = q.limit === undefined ? EXPORT_DEFAULT_LIMIT : /^[1-9][0-9]{0,5}$/.test(q.limit) ? Number(q.limit) : 0
        if (limit < 1 || limit > EXPORT_MAX_LIMIT) return yield* new InvalidRequest({ message: `limit must be a whole number from 1 to ${EXPORT_MAX_LIMIT}.`, param: "limit" })
        let lo: number
        let hi: number
        if (q.cursor !== undefined) {
          const m = /^([1-9][0-9]{0,14})-([0-9]{1,15})$/.exec(q.cursor)
          if (m === null) return yield* new InvalidRequest({ message: "cursor is not one this endpoint gave (x-next-cursor).", param: "cursor" })
          lo = Number(m[1])
          hi = Number(m[2])
        } else if (period !== null) {
          const range = yield* repo.periodRange(projectId, period).pipe(Effect.orDie)
          lo = range?.lo ?? 1
          hi = range?.hi ?? 0
        } else {
          lo = 1
          hi = yield* repo.head(projectId).pipe(Effect.orDie)
        }
        const last = Math.min(hi, lo + limit - 1)
        const nextCursor = last < hi ? `${last + 1}-${hi}` : null
        const keys = yield* signer.publicKeys
        // Every published rate card (a handful): a customer recomputes each charge from the export alone.
        const rateCards = yield* pricing.published
        const header = headerLine({ project_id: projectId, period, cursor: q.cursor ?? null, next_cursor: nextCursor, keys, rate_cards: rateCards })
        const encoder = new TextEncoder()
        const receipts = Stream.paginateChunkEffect(lo, (from) =>
          from > last
            ? Effect.succeed([Chunk.empty<string>(), Option.none<number>()] as const)
            : Effect.map(repo.bodies(projectId, from, last, period, EXPORT_CHUNK).pipe(Effect.orDie), (rows) => {
                const text = rows.length === 0 ? "" : rows.map((r) => r.body).join("\n") + "\n"
                const next = rows.length < EXPORT_CHUNK ? Option.none<number>() : Option.some(rows[rows.length - 1]!.seq + 1)
                return [text.length === 0 ? Chunk.empty<string>() : Chunk.of(text), next] as const
              })
        )
        const body = Stream.concat(Stream.make(`${header}\n`), receipts).pipe(Stream.map((s) => encoder.encode(s)))
        return { nextCursor, body } satisfies ExportPage
      })

    return { tick, extend, extendAll, closePeriods, checkpointOf, checkpoint, inclusion, consistency, statement, statementOf, exportPage, interval } as const
  }),
  dependencies: [ReceiptLogRepo.Default]
}) {}
