/**
 * ChatStore: the governed call's transactions run the same way in the store worker (a file store)
 * and inline (an in-memory store, or TOLLGATE_STORE_WORKER=false): same refusals, same rows, same
 * signed receipt chain. The worker's connection and the main thread's write the same file, so the
 * budget guard must hold across the two writers, and a transaction in flight at shutdown commits.
 */
import { SqlClient } from "@effect/sql"
import Database from "better-sqlite3"
import { Cause, Deferred, Effect, Exit, Layer } from "effect"
import { spawnSync } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { verifyReceipt } from "../../spec/receipt.ts"
import { Projects } from "../../src/services/Projects.ts"
import { ReceiptKeyLive, ReceiptSigner } from "../../src/services/ReceiptSigner.ts"
import { makeChatTransactions, type ReserveArgs } from "../../src/store/chatTransactions.ts"
import { ChatStore, StoreWorkerEntry } from "../../src/store/ChatStore.ts"
import { DatabaseLive, Sqlite } from "../../src/store/Database.ts"
import { DEFAULT_NOW, reserveArgs as portReserveArgs, settleArgs as portSettleArgs } from "../support/portArgs.ts"
import { newProject } from "../services/layers.ts"
import { testRuntime } from "../support/runtime.ts"

const dirs: Array<string> = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

const fileUrl = () => {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-chatstore-"))
  dirs.push(dir)
  return { url: `sqlite:${join(dir, "store.db")}`, file: join(dir, "store.db") }
}

const chatStoreLayer = ChatStore.Default.pipe(
    Layer.provide(ReceiptKeyLive),
    Layer.provideMerge(Layer.mergeAll(Projects.Default, ReceiptSigner.Default)),
    Layer.provideMerge(DatabaseLive)
  )

const NOW = DEFAULT_NOW

const reserveArgs = (projectId: string, amount: number, claim?: { key: string; fingerprint: string }): ReserveArgs =>
  portReserveArgs(projectId, amount, claim === undefined ? {} : { claim })
const settleArgs = (r: ReserveArgs, amount: number, charge: number) => portSettleArgs(r, amount, charge)

/** Everything the four transactions write, in a comparable form (ids and times left out). */
const snapshot = (db: Database.Database, projectId: string) => ({
  window: db.prepare("SELECT spent, reserved FROM budget_windows WHERE project_id = ?").get(projectId),
  reservations: db.prepare("SELECT amount, state, charge FROM reservations WHERE project_id = ? ORDER BY created_at, amount").all(projectId),
  requests: db.prepare("SELECT status, credits_reserved, credits_charged, error_code FROM requests WHERE project_id = ? ORDER BY credits_reserved").all(projectId),
  receipts: db.prepare("SELECT seq, credits_charged FROM receipts WHERE project_id = ? ORDER BY seq").all(projectId),
  idempotency: db.prepare("SELECT key, state, status FROM idempotency WHERE project_id = ? ORDER BY key").all(projectId)
})

/** One scenario through every transaction: reserve (fits, over budget, claim lost), settle, abandon, extend. */
const scenario =
  Effect.gen(function* () {
    const store = yield* ChatStore
    const signer = yield* ReceiptSigner
    const p = yield* newProject({ budget_credits: 1_000 })

    const a = reserveArgs(p.id, 400, { key: "k-a", fingerprint: "f-a" })
    expect(yield* store.reserve(a)).toEqual({ outputCap: 1, reservation: 400 })
    const over = yield* Effect.flip(store.reserve(reserveArgs(p.id, 601)))
    const lost = yield* Effect.flip(store.reserve(reserveArgs(p.id, 10, { key: "k-a", fingerprint: "f-other" })))
    yield* store.settle(settleArgs(a, 400, 150))

    const b = reserveArgs(p.id, 300, { key: "k-b", fingerprint: "f-b" })
    yield* store.reserve(b)
    yield* store.extend({ deadline: NOW + 999_000, streams: [{ reservationId: b.hold.reservationId, requestId: b.request.id, idempotent: { scope: b.claim!.scope, key: "k-b" } }] })
    yield* store.abandon({ now: NOW + 2, reservationId: b.hold.reservationId, requestId: b.request.id, code: "route_unavailable", message: "down", attempts: [], idempotent: { scope: b.claim!.scope, key: "k-b" } })

    const c = reserveArgs(p.id, 200)
    yield* store.reserve(c)
    yield* store.extend({ deadline: NOW + 999_000, streams: [{ reservationId: c.hold.reservationId, requestId: c.request.id, idempotent: undefined }] })

    return { over, lost, projectId: p.id, held: c.hold.reservationId, publicPem: signer.publicPem, runsIn: store.runsIn }
  })

/** What the scenario left in the store, read through `db`. */
const inspect = (db: Database.Database, projectId: string, heldId: string) => ({
  snap: snapshot(db, projectId),
  receipt: JSON.parse((db.prepare("SELECT body FROM receipts WHERE project_id = ?").get(projectId) as { body: string }).body),
  deadline: (db.prepare("SELECT deadline FROM reservations WHERE id = ?").get(heldId) as { deadline: number }).deadline
})

describe("ChatStore", () => {
  it("runs every transaction in the worker exactly as inline: same refusals, same rows, a receipt signed with the service key", async () => {
    const { url, file } = fileUrl()
    const worker = testRuntime(chatStoreLayer, { databaseUrl: url })
    const inlineRt = testRuntime(chatStoreLayer, { databaseUrl: "sqlite::memory:" })
    try {
      const w = await worker.runPromise(scenario)
      const fileDb = new Database(file, { readonly: true })
      const inW = { ...w, ...inspect(fileDb, w.projectId, w.held) }
      fileDb.close()
      const l = await inlineRt.runPromise(scenario)
      // The inline store is in memory: read it through its own connection.
      const inL = { ...l, ...inspect(await inlineRt.runPromise(Effect.map(Sqlite, (s) => s.db)), l.projectId, l.held) }

      expect(inW.runsIn).toBe("worker")
      expect(inL.runsIn).toBe("inline")
      for (const r of [inW, inL]) {
        expect(r.over._tag).toBe("OverBudget")
        expect(r.lost).toEqual({ _tag: "ClaimLost", outcome: { _tag: "Conflict" } })
        expect(r.snap.window).toEqual({ spent: 150, reserved: 200 })
        expect(r.snap.reservations).toEqual([
          { amount: 200, state: "held", charge: null },
          { amount: 300, state: "voided", charge: 0 },
          { amount: 400, state: "settled", charge: 150 }
        ])
        expect(r.snap.requests).toEqual([
          { status: "pending", credits_reserved: 200, credits_charged: null, error_code: null },
          { status: "failed", credits_reserved: 300, credits_charged: 0, error_code: "route_unavailable" },
          { status: "completed", credits_reserved: 400, credits_charged: 150, error_code: null }
        ])
        expect(r.snap.receipts).toEqual([{ seq: 1, credits_charged: 150 }])
        expect(r.snap.idempotency).toEqual([{ key: "k-a", state: "finished", status: 200 }])
        expect(r.deadline).toBe(NOW + 999_000)
        expect(verifyReceipt(r.receipt, r.publicPem)).toEqual([])
      }
    } finally {
      await worker.dispose()
      await inlineRt.dispose()
    }
  })

  it("answers reservations, plain and streamed, before the fsync of a settlement sent in the same turn (a stream's is put on disk by sync)", async () => {
    const { url, file } = fileUrl()
    const rt = testRuntime(chatStoreLayer, { databaseUrl: url })
    try {
      const { order, projectId } = await rt.runPromise(
        Effect.gen(function* () {
          const store = yield* ChatStore
          const p = yield* newProject({ budget_credits: 1_000 })
          const a = reserveArgs(p.id, 100)
          yield* store.reserve(a)
          const plain = reserveArgs(p.id, 10)
          const streamed = reserveArgs(p.id, 20)
          const order: Array<string> = []
          const noted = <A, E>(name: string, effect: Effect.Effect<A, E>) => Effect.tap(effect, () => Effect.sync(() => order.push(name)))
          // One turn. An idle worker is sent the turn's first call at once (the extend, alone); the
          // three that follow wait for the end of the turn and go in one message, the settlement first.
          yield* Effect.all(
            [
              store.extend({ deadline: 0, streams: [] }),
              noted("settle", store.settle(settleArgs(a, 100, 40))),
              noted("reserve (plain)", store.reserve(plain)),
              noted("reserve (stream)", store.reserve({ ...streamed, request: { ...streamed.request, stream: true } }))
            ],
            { concurrency: "unbounded" }
          )
          return { order, projectId: p.id }
        })
      )
      // The reservations committed first, in their own unsynced batch, and were answered at once, in
      // order; the settlement's synced batch came after (docs/decisions/0013).
      expect(order).toEqual(["reserve (plain)", "reserve (stream)", "settle"])
      const db = new Database(file, { readonly: true })
      try {
        expect(db.prepare("SELECT spent, reserved FROM budget_windows WHERE project_id = ?").get(projectId)).toEqual({ spent: 40, reserved: 30 })
      } finally {
        db.close()
      }
    } finally {
      await rt.dispose()
    }
  })

  it("offers syncThen in the worker: a stream's reservation is answered once committed, and sync answers after it, the hold then in the file", async () => {
    const { url, file } = fileUrl()
    const rt = testRuntime(chatStoreLayer, { databaseUrl: url })
    try {
      const projectId = await rt.runPromise(
        Effect.gen(function* () {
          const store = yield* ChatStore
          const p = yield* newProject({ budget_credits: 1_000 })
          const streamed = reserveArgs(p.id, 20)
          yield* store.reserve({ ...streamed, request: { ...streamed.request, stream: true } })
          expect(store.syncThen).toBeDefined()
          const synced = yield* Effect.async<Exit.Exit<void>>((resume) => store.syncThen!((outcome) => resume(Effect.succeed(outcome))))
          expect(Exit.isSuccess(synced)).toBe(true)
          return p.id
        })
      )
      const db = new Database(file, { readonly: true })
      try {
        expect(db.prepare("SELECT reserved FROM budget_windows WHERE project_id = ?").get(projectId)).toEqual({ reserved: 20 })
      } finally {
        db.close()
      }
    } finally {
      await rt.dispose()
    }
  })

  it("sizes each call's output cap on the budget left inside its own transaction: concurrent calls shrink to fit instead of failing", async () => {
    const { url } = fileUrl()
    const rt = testRuntime(chatStoreLayer, { databaseUrl: url })
    try {
      const results = await rt.runPromise(
        Effect.gen(function* () {
          const store = yield* ChatStore
          const p = yield* newProject({ budget_credits: 1_000 })
          // No max_tokens: the cap is what the budget allows, up to the route's 600 (1 Credit a token).
          const open = (): ReserveArgs => {
            const r = reserveArgs(p.id, 0)
            return { ...r, sizing: { ...r.sizing, chain: [{ name: "demo", prices: { input: 0, output: 1_000_000 }, routeLimit: 600 }], inputTokens: 0, requested: undefined } }
          }
          // Sent in one turn: they run in one batch, one after another, each on the window the one before left.
          return yield* Effect.all([store.reserve(open()), store.reserve(open()), Effect.flip(store.reserve(open()))], { concurrency: "unbounded" })
        })
      )
      expect(results[0]).toEqual({ outputCap: 600, reservation: 600 })
      expect(results[1]).toEqual({ outputCap: 400, reservation: 400 })
      expect(results[2]).toMatchObject({ _tag: "OverBudget", param: "project" })
    } finally {
      await rt.dispose()
    }
  })

  it("keeps spent + reserved ≤ cap when the worker and the main thread reserve on the same file at once", async () => {
    const { url, file } = fileUrl()
    const rt = testRuntime(chatStoreLayer, { databaseUrl: url })
    try {
      const outcome = await rt.runPromise(
        Effect.gen(function* () {
          const store = yield* ChatStore
          // The same reservation body, run inline on the main thread's connection: the second writer.
          const main = yield* Sqlite
          const inline = makeChatTransactions(main.db, { keyId: "", seal: () => { throw new Error("no settlement here") } })
          const p = yield* newProject({ budget_credits: 1_000 })
          // 40 holds of 30 through the worker, 40 through the main thread's connection, interleaved.
          const viaWorker = Array.from({ length: 40 }, () => Effect.exit(Effect.asVoid(Effect.mapError(store.reserve(reserveArgs(p.id, 30)), (e) => e._tag))))
          const viaMain = Array.from({ length: 40 }, () =>
            Effect.exit(Effect.asVoid(Effect.mapError(main.transact<unknown, { _tag: string }>((abort) => inline.reserve(reserveArgs(p.id, 30), abort)), (e) => e._tag)))
          )
          const exits = yield* Effect.all(viaWorker.flatMap((w, i) => [w, viaMain[i]!]), { concurrency: "unbounded" })
          return { p, exits }
        })
      )
      const db = new Database(file, { readonly: true })
      const window = db.prepare("SELECT spent, reserved FROM budget_windows WHERE project_id = ?").get(outcome.p.id) as { spent: number; reserved: number }
      const held = db.prepare("SELECT COUNT(*) AS n FROM reservations WHERE project_id = ?").get(outcome.p.id) as { n: number }
      db.close()
      const granted = outcome.exits.filter(Exit.isSuccess).length
      // 33 holds of 30 fit under 1,000; every other one was refused (never a defect: no SQLITE_BUSY).
      expect(granted).toBe(33)
      expect(outcome.exits.filter((e) => Exit.isFailure(e) && e.cause._tag === "Fail")).toHaveLength(80 - 33)
      expect(window).toEqual({ spent: 0, reserved: 990 })
      expect(held.n).toBe(33)
    } finally {
      await rt.dispose()
    }
  })

  it("makes a worker transaction wait for a main-thread write transaction that spans turns, instead of failing busy", async () => {
    const { url } = fileUrl()
    const rt = testRuntime(chatStoreLayer, { databaseUrl: url })
    try {
      const { exit, order } = await rt.runPromise(
        Effect.gen(function* () {
          const store = yield* ChatStore
          const sql = yield* SqlClient.SqlClient
          const p = yield* newProject({ budget_credits: 1_000 })
          const order: Array<string> = []
          // The main connection holds the write lock (an admin transaction across turns); the
          // reservation is sent once it holds it (a gate, not a timer). The lock is then kept 300 ms
          // of real time: the worker is another thread, waiting in SQLite's busy_timeout, which no
          // TestClock reaches.
          const locked = yield* Deferred.make<void>()
          const admin = sql.withTransaction(
            Effect.gen(function* () {
              yield* sql`UPDATE projects SET budget_credits = 2000 WHERE id = ${p.id}`
              yield* Deferred.succeed(locked, undefined)
              yield* Effect.sleep("300 millis")
              order.push("admin")
            })
          )
          const reserve = Effect.zipRight(Deferred.await(locked), store.reserve(reserveArgs(p.id, 1_500))).pipe(
            Effect.tap(() => Effect.sync(() => order.push("reserve"))),
            Effect.exit
          )
          const [, exit] = yield* Effect.all([admin, reserve], { concurrency: "unbounded" })
          return { exit, order }
        })
      )
      // It waited for the lock (busy_timeout), then saw the raised cap: 1,500 fits under 2,000.
      expect(exit).toStrictEqual(Exit.succeed({ outputCap: 1, reservation: 1_500 }))
      expect(order).toEqual(["admin", "reserve"])
    } finally {
      await rt.dispose()
    }
  })

  it("offers the settlement by callback in the worker only: settleThen writes what settle writes, answers once after the commit, and tells a defect once the store is closed", async () => {
    const { url, file } = fileUrl()
    const rt = testRuntime(chatStoreLayer, { databaseUrl: url })
    const inlineRt = testRuntime(chatStoreLayer, { databaseUrl: "sqlite::memory:" })
    try {
      expect(await inlineRt.runPromise(Effect.map(ChatStore, (s) => s.settleThen))).toBeUndefined()
      const { p, store } = await rt.runPromise(Effect.all({ p: newProject({ budget_credits: 1_000 }), store: ChatStore }))
      const settleThen = store.settleThen!
      const a = reserveArgs(p.id, 400, { key: "k-a", fingerprint: "f-a" })
      const b = reserveArgs(p.id, 300, { key: "k-b", fingerprint: "f-b" })
      await rt.runPromise(Effect.all([store.reserve(a), store.reserve(b)]))
      await rt.runPromise(store.settle(settleArgs(a, 400, 150)))
      const told: Array<Exit.Exit<void>> = []
      await new Promise<void>((resolve) =>
        settleThen(settleArgs(b, 300, 120), (written) => {
          told.push(written)
          resolve()
        })
      )
      expect(told).toHaveLength(1)
      expect(Exit.isSuccess(told[0]!)).toBe(true)
      const db = new Database(file, { readonly: true })
      const snap = snapshot(db, p.id)
      const receipts = (db.prepare("SELECT body FROM receipts WHERE project_id = ? ORDER BY seq").all(p.id) as Array<{ body: string }>).map((r) => JSON.parse(r.body))
      db.close()
      expect(snap.window).toEqual({ spent: 270, reserved: 0 })
      expect(snap.reservations).toEqual([
        { amount: 300, state: "settled", charge: 120 },
        { amount: 400, state: "settled", charge: 150 }
      ])
      expect(snap.receipts).toEqual([
        { seq: 1, credits_charged: 150 },
        { seq: 2, credits_charged: 120 }
      ])
      expect(snap.idempotency).toEqual([
        { key: "k-a", state: "finished", status: 200 },
        { key: "k-b", state: "finished", status: 200 }
      ])
      const publicPem = await rt.runPromise(Effect.map(ReceiptSigner, (s) => s.publicPem))
      for (const r of receipts) expect(verifyReceipt(r, publicPem)).toEqual([])
      await rt.dispose()
      const closed = await new Promise<Exit.Exit<void>>((resolve) => settleThen(settleArgs(reserveArgs(p.id, 1), 1, 1), resolve))
      expect(Exit.isFailure(closed) && Cause.isDie(closed.cause)).toBe(true)
      expect(Exit.isFailure(closed) ? Cause.squash(closed.cause) : undefined).toBeInstanceOf(Error)
    } finally {
      await rt.dispose()
      await inlineRt.dispose()
    }
  })

  it("commits every transaction sent before shutdown, then refuses new ones instead of hanging", async () => {
    const { url, file } = fileUrl()
    const rt = testRuntime(chatStoreLayer, { databaseUrl: url })
    const { p, store } = await rt.runPromise(Effect.all({ p: newProject({ budget_credits: 1_000_000 }), store: ChatStore }))
    const sent = Array.from({ length: 300 }, () => reserveArgs(p.id, 1))
    const pending = sent.map((args) => rt.runPromise(store.reserve(args)))
    await rt.dispose()
    await Promise.all(pending)
    const db = new Database(file, { readonly: true })
    const held = db.prepare("SELECT COUNT(*) AS n, SUM(amount) AS total FROM reservations WHERE project_id = ? AND state = 'held'").get(p.id)
    db.close()
    expect(held).toEqual({ n: 300, total: 300 })
    const after = await Effect.runPromiseExit(store.reserve(reserveArgs(p.id, 1)))
    expect(Exit.isFailure(after) && after.cause._tag === "Die").toBe(true)
  })

  it("restarts a worker that died: its call in flight fails, calls fail fast while it is down, and the new one serves", async () => {
    const { url, file } = fileUrl()
    const rt = testRuntime(
      chatStoreLayer.pipe(Layer.provide(Layer.succeed(StoreWorkerEntry, new URL("../support/dyingStoreWorker.mjs", import.meta.url)))),
      { databaseUrl: url }
    )
    const waitFor = async (ok: boolean) => {
      for (let i = 0; i < 500 && (await rt.runPromise(ChatStore)).health().ok !== ok; i++) await new Promise((r) => setTimeout(r, 10))
      return (await rt.runPromise(ChatStore)).health()
    }
    try {
      const { p, store } = await rt.runPromise(Effect.all({ p: newProject({ budget_credits: 1_000 }), store: ChatStore }))
      await rt.runPromise(store.reserve(reserveArgs(p.id, 10)))
      expect(store.health()).toEqual({ ok: true })

      // The worker dies with this call in hand, before running it (test/support/dyingStoreWorker.mjs).
      const killed = await rt.runPromiseExit(store.reserve(reserveArgs(p.id, 13)))
      expect(Exit.isFailure(killed) && killed.cause._tag === "Die" && String(Cause.squash(killed.cause))).toContain("the store worker stopped (exit code 3)")
      const down = await waitFor(false)
      expect(down.ok).toBe(false)
      // While it is down a call fails at once, with the reason, instead of waiting.
      const refused = await rt.runPromiseExit(store.reserve(reserveArgs(p.id, 20)))
      expect(Exit.isFailure(refused) && String(Cause.squash(refused.cause))).toContain("the store is unavailable")

      expect(await waitFor(true)).toEqual({ ok: true })
      await rt.runPromise(store.reserve(reserveArgs(p.id, 30)))
      const db = new Database(file, { readonly: true })
      const amounts = db.prepare("SELECT amount FROM reservations WHERE project_id = ? ORDER BY amount").all(p.id)
      db.close()
      // The killed call never ran, the refused one was never sent: only the two served ones are held.
      expect(amounts).toEqual([{ amount: 10 }, { amount: 30 }])
    } finally {
      await rt.dispose()
    }
  })

  it("starts under a top-level await with nothing else keeping the event loop alive, as a program does", () => {
    const { file } = fileUrl()
    const child = spawnSync(process.execPath, ["--import", "tsx", "test/support/startStore.ts", file], { encoding: "utf8", timeout: 60_000 })
    // An unref'ed worker before it is up leaves the loop empty: Node then exits 13 (unsettled await).
    expect({ status: child.status, out: child.stdout.trim() }).toEqual({ status: 0, out: JSON.stringify({ runsIn: "worker", health: { ok: true } }) })
  })
})

describe("assertion mode (TOLLGATE_ASSERT=1)", () => {
  it("a settlement or abandonment that leaves its window off the rulebook dies and rolls back, in the worker and inline", async () => {
    for (const databaseUrl of [fileUrl().url, "sqlite::memory:"]) {
      const rt = testRuntime(chatStoreLayer, { databaseUrl, assertInvariants: true })
      try {
        const outcome = await rt.runPromise(
          Effect.gen(function* () {
            const store = yield* ChatStore
            const sql = yield* SqlClient.SqlClient
            const p = yield* newProject({ budget_credits: 1_000 })
            // A sound window: settling and abandoning pass the check.
            const ok = reserveArgs(p.id, 100)
            yield* store.reserve(ok)
            yield* store.settle(settleArgs(ok, 100, 40))
            const a = reserveArgs(p.id, 50)
            const b = reserveArgs(p.id, 60)
            yield* store.reserve(a)
            yield* store.reserve(b)
            // Plant a violation: spent no longer equals the receipts' sum.
            yield* sql`UPDATE budget_windows SET spent = spent + 1 WHERE project_id = ${p.id}`
            const settled = yield* Effect.exit(store.settle(settleArgs(a, 50, 10)))
            const abandoned = yield* Effect.exit(store.abandon({ now: NOW + 2, reservationId: b.hold.reservationId, requestId: b.request.id, code: "x", message: "x", attempts: [], idempotent: undefined }))
            const rows = yield* sql<{ state: string }>`SELECT state FROM reservations WHERE project_id = ${p.id} ORDER BY amount`
            return { settled, abandoned, states: rows.map((r) => r.state), runsIn: store.runsIn }
          })
        )
        for (const exit of [outcome.settled, outcome.abandoned]) {
          expect(Exit.isFailure(exit) && Cause.isDie(exit.cause), `${outcome.runsIn}: ${String(exit)}`).toBe(true)
          if (Exit.isFailure(exit)) expect(String(Cause.squash(exit.cause))).toMatch(/TOLLGATE_ASSERT: window .* spent-equals-receipts \(spent (41|51), receipts sum (40|50)\)/)
        }
        // Both rolled back: the holds are still held.
        expect(outcome.states).toEqual(["held", "held", "settled"])
      } finally {
        await rt.dispose()
      }
    }
  })
})
