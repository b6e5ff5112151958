/**
 * Preload for bench/threads.ts (`node --import …/gcObserver.mjs <target>`): records the main
 * thread's garbage-collector pauses as `[startedAt (ms since the epoch), duration ms, kind]` and, on
 * SIGUSR2, writes those recorded so far to $TOLLGATE_BENCH_GC_FILE as JSON and starts again. Uses
 * `performance.timeOrigin` so the times line up with the load generator's in another process.
 */
import { writeFileSync } from "node:fs"
import { constants, PerformanceObserver } from "node:perf_hooks"

const kinds = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: "minor",
  [constants.NODE_PERFORMANCE_GC_MAJOR]: "major",
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: "incremental",
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: "weak callbacks"
}
let pauses = []
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) pauses.push([performance.timeOrigin + e.startTime, e.duration, kinds[e.detail?.kind] ?? "other"])
}).observe({ entryTypes: ["gc"] })
process.on("SIGUSR2", () => {
  writeFileSync(process.env.TOLLGATE_BENCH_GC_FILE, JSON.stringify(pauses))
  pauses = []
})
