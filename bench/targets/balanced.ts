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
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import { type Child, startBalancer, startChild } from "../lib/procs.ts"

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

const started: Array<Child<{ port: number }>> = []
const stopAll = () => Promise.allSettled(started.map((c) => c.stop()))
try {
  // Each process as the bench starts any target (bench/lib/procs.ts startChild: its ready line, a bound
  // wait, killed if it fails); one that fails takes the others down with it.
  // All settled before any is judged, so none is still starting when the others are stopped.
  const settled = await Promise.allSettled(
    Array.from({ length: instances }, (_, i) => startChild<{ port: number }>(`process ${i} of ${script}`, process.execPath, [...process.execArgv, join(here, "..", script), ...argv]))
  )
  for (const r of settled) if (r.status === "fulfilled") started.push(r.value)
  const failed = settled.find((r) => r.status === "rejected")
  if (failed !== undefined) throw failed.reason
  const children = [...started]
  const balancer = await startBalancer(children.map((c) => c.ready.port))
  started.push(balancer)
  process.stdout.write(JSON.stringify({ ready: true, port: balancer.ready.port, ports: children.map((c) => c.ready.port), pids: children.map((c) => c.pid) }) + "\n")
} catch (e) {
  await stopAll()
  console.error(`balanced.ts: ${e instanceof Error ? e.message : String(e)}`)
  process.exit(1)
}
const stop = () => void stopAll().finally(() => process.exit(0))
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
