/**
 * The bench's CPU accounting (bench/lib/procs.ts `sampleProc`): a process's CPU time, and its main
 * thread's alone. The bench reads the split to tell an event loop that is the bottleneck from one
 * with room while other threads (the store worker, V8's helpers) burn CPU.
 */
import { spawn } from "node:child_process"
import { describe, expect, it } from "vitest"
import { cpuSplit, sampleProc } from "../../bench/lib/procs.ts"

/**
 * A child whose only busy thread is a worker: it spins `ms` of CPU there, then says "done" and keeps
 * the worker alive (so its thread is still listed), blocked on Atomics.wait.
 */
const spinInWorker = (ms: number) =>
  new Promise<{ pid: number; stop: () => void }>((resolve, reject) => {
    const script = `
      const { Worker } = require("node:worker_threads")
      const w = new Worker("const { parentPort } = require('node:worker_threads'); const t = process.cpuUsage(); while ((process.cpuUsage(t).user + process.cpuUsage(t).system) / 1000 < ${ms}) {} parentPort.postMessage('spun'); Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0)", { eval: true })
      w.on("message", () => console.log("done"))
    `
    const child = spawn(process.execPath, ["-e", script], { stdio: ["ignore", "pipe", "inherit"] })
    child.once("error", reject)
    child.stdout.setEncoding("utf8")
    child.stdout.on("data", (s: string) => {
      if (s.includes("done")) resolve({ pid: child.pid!, stop: () => child.kill("SIGKILL") })
    })
  })

describe("sampleProc", () => {
  it("counts a worker thread's CPU in the process's time but not in the main thread's", async () => {
    const child = await spinInWorker(400)
    try {
      const s = sampleProc(child.pid)
      // The worker's spin is in the process's total (clock ticks of 10 ms: allow one short)...
      expect(s.cpuMs).toBeGreaterThanOrEqual(390)
      // ...and the main thread, which only started the worker and waited, holds a small share of it.
      expect(s.mainCpuMs).toBeGreaterThanOrEqual(0)
      expect(s.cpuMs - s.mainCpuMs).toBeGreaterThanOrEqual(390)
      expect(s.rssMb).toBeGreaterThan(0)
    } finally {
      child.stop()
    }
  }, 30_000)

  it("splits a process's CPU into its main thread, its busiest other thread and the rest", async () => {
    const child = await spinInWorker(400)
    try {
      const s = sampleProc(child.pid)
      const empty = { cpuMs: 0, mainCpuMs: 0, threadCpuMs: new Map<number, number>(), rssMb: 0, peakRssMb: 0 }
      const split = cpuSplit(child.pid, empty, s)
      expect(split.busiestOther).toBeGreaterThanOrEqual(390)
      expect(split.main).toBe(s.mainCpuMs)
      expect(split.main + split.busiestOther + split.rest).toBeCloseTo(s.cpuMs, 6)
      expect(split.rest).toBeLessThan(split.busiestOther)
    } finally {
      child.stop()
    }
  }, 30_000)

  it("answers NaN, not a throw, for a process that is gone", () => {
    const s = sampleProc(2 ** 22 + 12345)
    expect(Number.isNaN(s.cpuMs) && Number.isNaN(s.mainCpuMs)).toBe(true)
  })
})
