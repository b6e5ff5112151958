/**
 * A store built by real traffic through a real gateway (mock upstream over HTTP), on SQLite or on
 * PostgreSQL, snapshotted so each test can tamper with its own copy and audit it.
 */
import Database from "better-sqlite3"
import { copyFileSync, mkdtempSync, readFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import pg from "pg"
import { type AuditResult, auditStore } from "../../src/cli/audit.ts"
import { mockGatewayFile, startGateway, type TestGateway } from "../support/gateway.ts"
import { freshSchema, TEST_PG_URL, type TestSchema, withSchema } from "../support/pg.ts"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"

/** Credits per 1,000,000 tokens: large enough that charges are tens of Credits, not 1. */
export const PRICES = { input: 150_000, cached_input: 75_000, output: 600_000, reasoning: 900_000 }

export type Engine = "sqlite" | "pg"

export interface TrafficStore {
  readonly engine: Engine
  readonly gw: TestGateway
  readonly upstream: MockUpstream
  /** A consistent copy of the store after the traffic: a SQLite file, or a PostgreSQL schema's name. */
  readonly snapshot: string
  readonly projectA: string
  readonly projectB: string
  readonly budgetB: number
  /** The gateway's private signing key (PEM), as written beside the store. */
  readonly signingKeyPem: string
  /** One exported receipt (GET /v1/requests/{id}/receipt), as text. */
  readonly exportedReceipt: string
  readonly close: () => Promise<void>
}

export const chat = async (gw: TestGateway, key: string, body: Record<string, unknown>, headers: Record<string, string> = {}) => {
  const res = await fetch(`${gw.url}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: "auto", ...body })
  })
  return { status: res.status, text: await res.text(), requestId: res.headers.get("x-request-id") }
}

const ask = (content: string, extra: Record<string, unknown> = {}) => ({ messages: [{ role: "user", content }], ...extra })

export const buildTrafficStore = async (engine: Engine = "sqlite"): Promise<TrafficStore> => {
  const upstream = await startMockUpstream()
  const schema: TestSchema | undefined = engine === "pg" ? freshSchema() : undefined
  const gw = await startGateway(mockGatewayFile(upstream.url, undefined, { "gpt-test": PRICES }), {
    upstreamRetries: 0,
    ...(schema === undefined ? {} : { databaseUrl: schema.url })
  })
  const projectA = gw.projectId
  const budgetB = 50_000
  const created = await gw.admin("POST", "/admin/v1/projects", { name: "b", budget_credits: budgetB, rate_limit: { requests_per_minute: 6000 } })
  const projectB = created.body.id as string
  const keyB = (await gw.admin("POST", `/admin/v1/projects/${projectB}/keys`, { environment: "production" })).body.secret as string
  const keyA = gw.devKey

  const ok = <R extends { status: number; text: string }>(r: R): R => {
    if (r.status !== 200) throw new Error(`traffic failed: ${r.status} ${r.text}`)
    return r
  }
  // Project A: plain calls, idempotent calls and a replay, streams, every token class, a capped charge, a failure.
  for (let i = 0; i < 6; i++) ok(await chat(gw, keyA, ask(`plain question ${i}`)))
  for (let i = 0; i < 3; i++) ok(await chat(gw, keyA, ask(`idempotent question ${i}`, { metadata: { idempotency_key: `idem-${i}` } })))
  ok(await chat(gw, keyA, ask("idempotent question 0", { metadata: { idempotency_key: "idem-0" } }))) // replay, no new charge
  ok(await chat(gw, keyA, ask("stream with usage", { stream: true, stream_options: { include_usage: true }, metadata: { idempotency_key: "idem-stream" } })))
  ok(await chat(gw, keyA, ask("stream without usage", { stream: true })))
  upstream.pushBehavior({ usage: { prompt_tokens: 40, cached_tokens: 10, completion_tokens: 20, reasoning_tokens: 5 } })
  ok(await chat(gw, keyA, ask("all token classes")))
  upstream.pushBehavior({ usage: { prompt_tokens: 100_000, completion_tokens: 10 } }) // more than reserved: the charge is capped
  ok(await chat(gw, keyA, ask("understated input", { max_tokens: 16 })))
  upstream.pushBehavior({ status: 500 })
  const failed = await chat(gw, keyA, ask("this one fails", { metadata: { idempotency_key: "idem-fail" } }))
  if (failed.status !== 503) throw new Error(`expected 503, got ${failed.status}`)
  for (let i = 0; i < 3; i++) ok(await chat(gw, keyA, ask(`late question ${i}`)))
  // Project B.
  for (let i = 0; i < 4; i++) ok(await chat(gw, keyB, ask(`project b question ${i}`)))

  const last = ok(await chat(gw, keyA, ask("the exported one")))
  const exportedReceipt = await (await fetch(`${gw.url}/requests/${last.requestId}/receipt`, { headers: { authorization: `Bearer ${keyA}` } })).text()

  let snapshot: string
  if (schema === undefined) {
    snapshot = join(mkdtempSync(join(tmpdir(), "tollgate-audit-")), "snapshot.db")
    gw.db().exec(`VACUUM INTO '${snapshot}'`)
  } else {
    snapshot = await copySchema(schema.name)
  }
  const signingKeyPem = readFileSync(join(dirname(gw.dbPath), "receipt-signing-key.pem"), "utf8")
  return {
    engine,
    gw,
    upstream,
    snapshot,
    projectA,
    projectB,
    budgetB,
    signingKeyPem,
    exportedReceipt,
    close: async () => {
      await gw.close()
      await upstream.close()
      if (schema !== undefined) {
        schema.drop()
        await dropSchemas()
      }
    }
  }
}

let copies = 0
/** A fresh copy of the snapshot, tampered with by `tamper` (a writable handle), ready to audit. */
export const tampered = (snapshot: string, tamper: (db: Database.Database) => void = () => {}): string => {
  const path = join(dirname(snapshot), `copy-${++copies}.db`)
  copyFileSync(snapshot, path)
  const db = new Database(path)
  try {
    tamper(db)
  } finally {
    db.close()
  }
  return path
}

/** Audit a SQLite file (a path) or a PostgreSQL store (a postgres:// URL); one signature worker unless told. */
/** Statements on a store copy, the same text on both engines (`?` placeholders, no JSON functions). */
export interface Tamper {
  readonly all: <T>(sql: string, ...params: Array<unknown>) => Promise<Array<T>>
  readonly run: (sql: string, ...params: Array<unknown>) => Promise<void>
}

const sqliteTamper = (db: Database.Database): Tamper => ({
  all: async <T>(sql: string, ...params: Array<unknown>) => db.prepare(sql).all(...params) as Array<T>,
  run: async (sql, ...params) => void db.prepare(sql).run(...params)
})

const dollar = (sql: string) => {
  let i = 0
  return sql.replace(/\?/g, () => `$${++i}`)
}

/** A client on the test database, in `schema`, BIGINT as numbers; ended after `f`. */
const withPg = async <A>(schema: string | undefined, f: (client: pg.Client) => Promise<A>): Promise<A> => {
  const client = new pg.Client({ connectionString: schema === undefined ? TEST_PG_URL : withSchema(TEST_PG_URL, schema) })
  client.setTypeParser(20, Number)
  await client.connect()
  try {
    return await f(client)
  } finally {
    await client.end()
  }
}

const copies_: Array<string> = []

/** A copy of a PostgreSQL store's schema (every table, its rows and indexes): what VACUUM INTO is to SQLite. */
const copySchema = (from: string): Promise<string> =>
  withPg(undefined, async (client) => {
    const to = `${from}_c${copies_.length}`
    copies_.push(to)
    await client.query(`CREATE SCHEMA ${to}`)
    const tables = await client.query<{ table_name: string }>(
      `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE'`,
      [from]
    )
    for (const { table_name: t } of tables.rows) {
      await client.query(`CREATE TABLE ${to}.${t} (LIKE ${from}.${t} INCLUDING ALL)`)
      await client.query(`INSERT INTO ${to}.${t} SELECT * FROM ${from}.${t}`)
    }
    return to
  })

const dropSchemas = () => withPg(undefined, async (client) => {
  for (const s of copies_.splice(0)) await client.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`)
})

/**
 * A fresh copy of a snapshot (a SQLite file or a PostgreSQL schema), tampered with by `tamper`, ready
 * to audit: returns what `audit` takes (a file path, or a postgres:// URL in the copy's schema).
 */
export const tamperedCopy = async (engine: Engine, snapshot: string, tamper: (db: Tamper) => Promise<void> = async () => {}): Promise<string> => {
  if (engine === "sqlite") {
    const path = join(dirname(snapshot), `copy-${++copies}.db`)
    copyFileSync(snapshot, path)
    const db = new Database(path)
    try {
      await tamper(sqliteTamper(db))
    } finally {
      db.close()
    }
    return path
  }
  const schema = await copySchema(snapshot)
  await withPg(schema, (client) =>
    tamper({
      all: async <T>(sql: string, ...params: Array<unknown>) => (await client.query(dollar(sql), params)).rows as Array<T>,
      run: async (sql, ...params) => void (await client.query(dollar(sql), params))
    })
  )
  return withSchema(TEST_PG_URL, schema)
}

export const audit = (store: string, options: Partial<Parameters<typeof auditStore>[0]> = {}): Promise<AuditResult> =>
  auditStore({ database: store.includes("://") ? store : `sqlite:${store}`, limit: 100_000, jobs: 1, ...options })

/** Findings as sorted "kind subject" lines: what a test asserts exactly. */
export const named = (r: AuditResult): Array<string> => r.findings.map((f) => `${f.kind} ${f.subject}`).sort()
