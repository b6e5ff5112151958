/**
 * Bench child: Tollgate with full governance on the scale-out store — the same layer graph as
 * `npm start` (ServerLive) with `DATABASE_URL` on PostgreSQL (a fresh schema of the test database,
 * dropped at exit) and `REDIS_URL` (the shared rate limit), one openai-type provider on the mock
 * upstream and a default project whose budget and rate limit never bind (as bench/targets/tollgate.ts).
 *
 * `--instances N` (default 1) runs N instances on the one schema and Redis, each with its own pool,
 * epoch, instance id and receipt key: instance 0 in this process, the others each in a process of its
 * own, as a deployment runs them (the ready line's `pids` names them all, and the bench's CPU figure
 * sums them); with `--threads`, on worker threads of this process instead (one V8 platform — its
 * garbage collector's helper threads — and one libuv pool shared by the instances, which costs a call
 * more than separate processes do: docs/decisions/0057), behind a
 * round-robin TCP balancer on one port in its own process (bench/targets/splice.mjs: connection-level,
 * as an L4 load balancer on its own machine, its CPU not counted; with N = 1 none, unless `--lb`); `--lanes N` sets each instance's lanes (TOLLGATE_PG_LANES); `--affinity` sends each connection to the instance owning its first request's key. Prints one JSON line `{"ready":true,"port":N,"key":"tg_dev_…","schema":…,"ports":[…],"pids":[…]}` (`ports`:
 * each instance's own, for its /metrics; `pids`: this process and every instance process).
 *
 * Engines: TOLLGATE_BENCH_PG_URL (default postgres://postgres@127.0.0.1:5432/test) and
 * TOLLGATE_BENCH_REDIS_URL (default redis://127.0.0.1:6379); scripts/services.sh starts both.
 */
import { Option, Redacted } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads"
import pg from "pg"
import { makeSettings } from "../../src/domain/config.ts"
import { arg } from "../lib/args.ts"
import { startBalancer, startChild } from "../lib/procs.ts"
import { installProfilers } from "../lib/profilers.ts"
import { benchGateway, startServer } from "./server.ts"

interface InstanceData {
  readonly index: number
  readonly url: string
  readonly dir: string
  readonly upstream: string
  readonly model: string
  readonly lanes: number | undefined
}

const pgUrl = process.env.TOLLGATE_BENCH_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test"
const redisUrl = process.env.TOLLGATE_BENCH_REDIS_URL ?? "redis://127.0.0.1:6379"

/** One instance: ServerLive on the schema, on an ephemeral port; its port and (for the first) the development key. */
const startInstance = async (d: InstanceData) => {
  const gateway = benchGateway(d.upstream, d.model)
  const settings = makeSettings({
    port: 0,
    host: "127.0.0.1",
    databaseUrl: d.url,
    redisUrl: Option.some(Redacted.make(redisUrl)),
    pgPoolSize: 10,
    // `--lanes N`: the instance's lanes (TOLLGATE_PG_LANES; the default otherwise).
    ...(d.lanes === undefined ? {} : { pgLanes: d.lanes }),
    // TOLLGATE_BENCH_PG_MAX_WAIT_MS: the lane's wait bound (TOLLGATE_PG_MAX_WAIT_MS) — a tight one shows shedding under load (docs/decisions/0051).
    ...(process.env.TOLLGATE_BENCH_PG_MAX_WAIT_MS === undefined ? {} : { pgMaxWaitMs: Number(process.env.TOLLGATE_BENCH_PG_MAX_WAIT_MS) }),
    instanceId: `bench-${d.index}`,
    receiptKeyFile: Option.some(join(d.dir, `receipt-key-${d.index}.pem`)),
    adminToken: Option.some(Redacted.make("bench-admin-token")),
    accessLog: false,
    upstreamTimeoutMs: 30_000,
    upstreamDeadlineMs: 60_000,
    gateway
  })
  return startServer(settings)
}

const childData = arg("--instance-child")
if (!isMainThread) {
  const started = await startInstance(workerData as InstanceData)
  parentPort!.postMessage({ port: started.port })
  parentPort!.on("message", () => void started.dispose().finally(() => process.exit(0)))
} else if (childData !== undefined) {
  // An instance in a process of its own (the default for N > 1): its ready line on stdout (bench/lib/procs.ts startChild), stopped by SIGTERM.
  const started = await startInstance(JSON.parse(childData) as InstanceData)
  process.stdout.write(JSON.stringify({ ready: true, port: started.port }) + "\n")
  process.once("SIGTERM", () => void started.dispose().finally(() => process.exit(0)))
} else {
  // `--profile` / `--alloc-profile` (bench/profile.ts --target pg): instance 0's process, bench/lib/profilers.ts.
  await installProfilers()
  const instances = Number(arg("--instances") ?? "1")
  const dir = mkdtempSync(join(tmpdir(), "tollgate-bench-pg-"))
  const schema = `bench_${Date.now().toString(36)}_${process.pid}`
  const admin = new pg.Client({ connectionString: pgUrl })
  await admin.connect()
  await admin.query(`CREATE SCHEMA ${schema}`)
  // A start that fails leaves no schema behind.
  const dropSchema = () => admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
  process.once("uncaughtException", (e) => void dropSchema().finally(() => (console.error(e), process.exit(1))))
  process.once("unhandledRejection", (e) => void dropSchema().finally(() => (console.error(e), process.exit(1))))
  const url = `${pgUrl}${pgUrl.includes("?") ? "&" : "?"}options=${encodeURIComponent(`-c search_path=${schema}`)}`
  const data = (index: number): InstanceData => ({
    index,
    url,
    dir,
    upstream: (arg("--upstream") ?? "http://127.0.0.1:9100").replace(/\/+$/, ""),
    model: arg("--model") ?? "gpt-4o-mini",
    lanes: arg("--lanes") === undefined ? undefined : Number(arg("--lanes"))
  })
  // The first instance migrates the schema and creates the default project; the others then join.
  const first = await startInstance(data(0))
  // From sources (tsx), a worker registers tsx's loader before it imports this file; bundled, it runs the bundle.
  const self = import.meta.url
  const spawnWorker = (d: InstanceData) =>
    self.endsWith(".ts")
      ? new Worker(`import("tsx/esm/api").then((tsx) => { tsx.register(); return import(${JSON.stringify(self)}) })`, { eval: true, workerData: d })
      : new Worker(new URL(self), { workerData: d })
  // Each further instance a process of its own (as a deployment runs them), or with `--threads` a worker thread of this one.
  const asProcesses = !process.argv.includes("--threads")
  const startProcess = (d: InstanceData) =>
    startChild<{ port: number }>(`instance ${d.index}`, process.execPath, [...process.execArgv, process.argv[1]!, "--instance-child", JSON.stringify(d)], { timeoutMs: 60_000 })
  const workers = asProcesses ? [] : Array.from({ length: instances - 1 }, (_, i) => spawnWorker(data(i + 1)))
  const [children, workerPorts] = await Promise.all([
    asProcesses ? Promise.all(Array.from({ length: instances - 1 }, (_, i) => startProcess(data(i + 1)))) : Promise.resolve([]),
    Promise.all(workers.map((w) => new Promise<number>((resolve, reject) => (w.once("message", (m: { port: number }) => resolve(m.port)), w.once("error", reject)))))
  ])
  const ports = [first.port, ...workerPorts, ...children.map((c) => c.ready.port)]
  // Several instances, or `--lb`: a TCP balancer in its own process (bench/targets/splice.mjs) in front
  // of them, as in a deployment — its CPU is not the gateway's, and it shares no loop with an instance.
  // `--lb` with one instance puts that instance behind the same balancer, so 1 and 2 instances are
  // compared through the same hop (docs/decisions/0045).
  const balanced = ports.length > 1 || process.argv.includes("--lb")
  const fixedPort = arg("--port")
  const balancer = balanced ? await startBalancer(ports, { affinity: process.argv.includes("--affinity"), ...(fixedPort === undefined ? {} : { port: fixedPort }) }) : undefined
  const port = balancer?.ready.port ?? first.port
  // `ports`: each instance's own port, for bench/run.ts to read each one's /metrics (its store round trips).
  process.stdout.write(JSON.stringify({ ready: true, port, key: first.key, schema, instances: ports.length, ports, pids: [process.pid, ...children.map((c) => c.pid!)] }) + "\n")

  const stop = () =>
    void Promise.allSettled([...(balancer === undefined ? [] : [balancer.stop()]), ...workers.map((w) => new Promise((r) => (w.once("exit", r), w.postMessage("stop")))), ...children.map((c) => c.stop()), first.dispose()])
      .then(dropSchema)
      .finally(() => {
        rmSync(dir, { recursive: true, force: true })
        process.exit(0)
      })
  process.once("SIGTERM", stop)
  process.once("SIGINT", stop)
}
