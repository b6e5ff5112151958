/**
 * The engines' side of a PostgreSQL phase (issue 40's scaling model needs it): the CPU time of the
 * PostgreSQL and Redis server processes on this box (`/proc/<pid>/stat` of every process named
 * `postgres` or `redis-server`), and PostgreSQL's own counters — transactions committed in the
 * database (`pg_stat_database.xact_commit`) and WAL flushes (`pg_stat_wal.wal_sync`) — and Redis's
 * commands (`INFO stats` total_commands_processed: a governed call's admissions). The servers are
 * shared: another engineer's test run on the same database during a phase counts too, so these are
 * upper bounds of what the bench's calls cost; PostgreSQL reports its counters about once a second.
 */
import { readdirSync, readFileSync } from "node:fs"
import { Redis } from "ioredis"
import pg from "pg"

const CLK_TCK = 100

export interface EngineSample {
  /** CPU ms (user + system) of each live server process, by pid. */
  readonly postgres: ReadonlyMap<number, number>
  readonly redis: ReadonlyMap<number, number>
  readonly commits: number
  readonly walSyncs: number
  /** Commands Redis processed since it started (NaN when Redis did not answer). */
  readonly redisCommands: number
}

/** The engines' clients: PostgreSQL for its counters, Redis for its own. */
export interface Engines {
  readonly pg: pg.Client
  readonly redis: Redis
  readonly end: () => Promise<void>
}

const cpuOf = (names: ReadonlyArray<string>) => {
  const out = new Map<string, Map<number, number>>(names.map((n) => [n, new Map()]))
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      const open = stat.indexOf("(")
      const close = stat.lastIndexOf(")")
      const comm = stat.slice(open + 1, close)
      const m = out.get(comm)
      if (m === undefined) continue
      const fields = stat.slice(close + 2).split(" ")
      m.set(Number(entry), ((Number(fields[11]) + Number(fields[12])) * 1000) / CLK_TCK)
    } catch {
      // gone between readdir and read
    }
  }
  return out
}

/** CPU ms spent between two samples by the processes of `after` (a process born since counts from zero; one that died is lost). */
export const cpuBetween = (before: ReadonlyMap<number, number>, after: ReadonlyMap<number, number>) => {
  let ms = 0
  for (const [pid, t] of after) ms += t - (before.get(pid) ?? 0)
  return ms
}

export const sampleEngines = async (e: Engines): Promise<EngineSample> => {
  const cpu = cpuOf(["postgres", "redis-server"])
  const { rows } = await e.pg.query<{ commits: string; wal_sync: string }>(
    "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS commits, (SELECT wal_sync FROM pg_stat_wal) AS wal_sync"
  )
  const stats = await e.redis.info("stats").catch(() => "")
  const redisCommands = Number(/total_commands_processed:(\d+)/.exec(stats)?.[1] ?? NaN)
  return { postgres: cpu.get("postgres")!, redis: cpu.get("redis-server")!, commits: Number(rows[0]!.commits), walSyncs: Number(rows[0]!.wal_sync), redisCommands }
}

export const connectEngines = async (url: string, redisUrl: string): Promise<Engines> => {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  const redis = new Redis(redisUrl, { lazyConnect: false, maxRetriesPerRequest: 1 })
  return { pg: client, redis, end: async () => void (await Promise.allSettled([client.end(), redis.quit()])) }
}
