/**
 * Bench child: N processes of one simple target behind the bench's round-robin TCP balancer
 * (bench/targets/splice.mjs), each process on a port of its own — the same shape as
 * bench/targets/tollgatePg.ts's instances, for a target that keeps no state (the bare proxy).
 *
 *   tsx bench/targets/balanced.ts --instances 2 --script targets/bareProxy.ts --upstream http://127.0.0.1:9100
 *
 * It is the control of issue 40's "2 instances ≥ 1 instance" checks (bench/lib/scaleOut.ts): what a
 * second process costs any Node server on this box, with no database, no limiter and no chain
 * (docs/decisions/0059). Every argument but `--instances` and `--script` goes to each process.
 * Prints one JSON line `{"ready":true,"port":N,"ports":[…],"pids":[…]}` (`pids`: the processes that
 * serve, not this one, which only waits); SIGTERM stops them all.
 */
import { spawn } from "node:child_process"
import { dirname, join } from "node:path"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"

const here = dirname(fileURLToPath(import.meta.url))
const argv = process.argv.slice(2)
const take = (name: string): string | undefined => {
  const i = argv.indexOf(name)
  if (i === -1) return undefined
  const [, value] = argv.splice(i, 2)
  return value
}
const instances = Number(take("--instances") ?? "1")
const script = take("--script")
if (script === undefined || !Number.isInteger(instances) || instances < 1) {
  console.error("balanced.ts: --instances N (≥ 1) and --script PATH (under bench/) are required")
  process.exit(2)
}

/** One line of JSON on a child's stdout that names `port`, once it is there. */
const portOf = (child: ReturnType<typeof spawn>, what: string) =>
  new Promise<number>((resolve, reject) => {
    child.once("error", reject)
    child.once("exit", (code) => reject(new Error(`${what} exited (${code}) before it listened`)))
    createInterface({ input: child.stdout! }).on("line", (line) => {
      if (line.startsWith("{")) resolve((JSON.parse(line) as { port: number }).port)
    })
  })

const children = Array.from({ length: instances }, () =>
  spawn(process.execPath, [...process.execArgv, join(here, "..", script), ...argv], { stdio: ["ignore", "pipe", "inherit"] })
)
// A process that fails to start takes the others down with it: none is left serving on its own.
const startedOrStop = <A>(p: Promise<A>, started: ReadonlyArray<ReturnType<typeof spawn>>): Promise<A> =>
  p.catch((e: unknown) => {
    for (const c of started) c.kill("SIGKILL")
    console.error(`balanced.ts: ${e instanceof Error ? e.message : String(e)}`)
    process.exit(1)
  })
const ports = await startedOrStop(Promise.all(children.map((c, i) => portOf(c, `process ${i} of ${script}`))), children)
const balancer = spawn(process.execPath, [join(here, "splice.mjs"), "--ports", ports.join(",")], { stdio: ["ignore", "pipe", "inherit"] })
const port = await startedOrStop(portOf(balancer, "the balancer"), [...children, balancer])
process.stdout.write(JSON.stringify({ ready: true, port, ports, pids: children.map((c) => c.pid!) }) + "\n")

const stop = () =>
  void Promise.allSettled([balancer, ...children].map((c) => new Promise((r) => (c.once("exit", r), c.kill("SIGTERM"))))).finally(() => process.exit(0))
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
