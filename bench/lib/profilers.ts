/**
 * The profiler toggles a bench child offers to bench/profile.ts, shared by the Tollgate and the
 * governed-floor targets so both are profiled the same way and their figures compare.
 *
 * `--profile FILE`: SIGUSR2 starts the V8 CPU profiler, the next SIGUSR2 stops it and writes FILE, so
 * the profile covers exactly the measured load (no start-up, no shutdown).
 *
 * `--alloc-profile FILE`: the same toggle for V8's sampling heap profiler, counting every sampled
 * allocation, also those the garbage collector has since freed (what a call costs the young
 * generation, not what it keeps); with `--alloc-survivors`, only those that outlived a scavenge (what a
 * scavenge copies or promotes), including those a full GC freed since.
 *
 * Every frame is pointed back at its TypeScript line (bench/lib/sourceMap.ts).
 */
import { writeFileSync } from "node:fs"
import { arg, flag } from "./args.ts"
import { sourcePosition } from "./sourceMap.ts"

export const installProfilers = async (): Promise<void> => {
  const cpuFile = arg("--profile")
  const allocFile = arg("--alloc-profile")
  if (cpuFile === undefined && allocFile === undefined) return
  const { Session } = await import("node:inspector/promises")
  const session = new Session()
  session.connect()
  let running = false
  if (cpuFile !== undefined) {
    await session.post("Profiler.enable")
    await session.post("Profiler.setSamplingInterval", { interval: 200 })
    process.on("SIGUSR2", () => {
      running = !running
      if (running) return void session.post("Profiler.start")
      void session.post("Profiler.stop").then(({ profile }) => {
        for (const node of profile.nodes) {
          const { line, column } = sourcePosition(node.callFrame)
          node.callFrame.lineNumber = line
          node.callFrame.columnNumber = column
        }
        writeFileSync(cpuFile, JSON.stringify(profile))
        process.stderr.write(`profile written: ${cpuFile}\n`)
      })
    })
    return
  }
  const survivorsOnly = flag("--alloc-survivors")
  await session.post("HeapProfiler.enable")
  process.on("SIGUSR2", () => {
    running = !running
    if (running) {
      return void session.post("HeapProfiler.startSampling", {
        samplingInterval: 1024,
        includeObjectsCollectedByMajorGC: true,
        includeObjectsCollectedByMinorGC: !survivorsOnly
      })
    }
    void session.post("HeapProfiler.stopSampling").then(({ profile }) => {
      const mapFrames = (node: (typeof profile)["head"]) => {
        const { line, column } = sourcePosition(node.callFrame)
        node.callFrame.lineNumber = line
        node.callFrame.columnNumber = column
        node.children.forEach(mapFrames)
      }
      mapFrames(profile.head)
      writeFileSync(allocFile!, JSON.stringify(profile))
      process.stderr.write(`allocation profile written: ${allocFile}\n`)
    })
  })
}
