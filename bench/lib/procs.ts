/**
 * Child processes for the bench: one per target, so each has its own event loop, CPU time and RSS,
 * and none shares a loop with the load generator. Everything listens on 127.0.0.1 only.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { appendFileSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { join } from "node:path"

export interface Child<R> {
  readonly name: string
  readonly pid: number
  readonly ready: R
  /** Last lines of stderr (and stdout before ready), for error reports. */
  readonly log: () => string
  readonly stop: () => Promise<void>
}

export interface StartOptions<R> {
  readonly cwd?: string
  readonly env?: NodeJS.ProcessEnv
  readonly timeoutMs?: number
  /** Default: the first stdout line that parses as JSON with `ready: true`. */
  readonly probe?: () => Promise<R | undefined>
}

export const startChild = <R>(name: string, command: string, args: ReadonlyArray<string>, o: StartOptions<R> = {}): Promise<Child<R>> =>
  new Promise((resolve, reject) => {
    const proc: ChildProcess = spawn(command, args, {
      cwd: o.cwd,
      env: { ...process.env, ...o.env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    const lines: Array<string> = []
    const keep = (s: string) => {
      for (const l of s.split("\n")) if (l.trim() !== "") lines.push(l)
      if (lines.length > 60) lines.splice(0, lines.length - 60)
    }
    let settled = false
    let buffered = ""
    const timer = setTimeout(() => fail(new Error(`${name} did not become ready in ${o.timeoutMs ?? 30_000} ms`)), o.timeoutMs ?? 30_000)
    const child = (ready: R): Child<R> => ({
      name,
      pid: proc.pid!,
      ready,
      log: () => lines.join("\n"),
      stop: () =>
        new Promise<void>((done) => {
          if (proc.exitCode !== null || proc.signalCode !== null) return done()
          const kill = setTimeout(() => proc.kill("SIGKILL"), 5_000)
          proc.once("exit", () => {
            clearTimeout(kill)
            done()
          })
          proc.kill("SIGTERM")
        })
    })
    const succeed = (ready: R) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      resolve(child(ready))
    }
    const fail = (e: Error) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      proc.kill("SIGKILL")
      reject(new Error(`${e.message}\n--- ${name} output ---\n${lines.join("\n")}`))
    }
    proc.stdout!.setEncoding("utf8")
    proc.stderr!.setEncoding("utf8")
    proc.stderr!.on("data", keep)
    // BENCH_CHILD_LOG_DIR=dir keeps each child's whole stderr in dir/<name>.log (crash forensics).
    if (process.env.BENCH_CHILD_LOG_DIR) {
      const file = `${process.env.BENCH_CHILD_LOG_DIR}/${name}.log`
      proc.stderr!.on("data", (s: string) => appendFileSync(file, s))
    }
    proc.stdout!.on("data", (s: string) => {
      if (settled) return
      keep(s)
      if (o.probe !== undefined) return
      buffered += s
      let nl: number
      while ((nl = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, nl).trim()
        buffered = buffered.slice(nl + 1)
        if (!line.startsWith("{")) continue
        try {
          const parsed = JSON.parse(line) as { ready?: boolean }
          if (parsed.ready === true) return succeed(parsed as R)
        } catch {
          // a log line that is not ours
        }
      }
    })
    proc.once("exit", (code, signal) => fail(new Error(`${name} exited early (code ${code}, signal ${signal})`)))
    proc.once("error", fail)
    if (o.probe !== undefined) {
      const probe = o.probe
      const poll = async () => {
        while (!settled) {
          const r = await probe().catch(() => undefined)
          if (r !== undefined) return succeed(r)
          await new Promise((res) => setTimeout(res, 100))
        }
      }
      void poll()
    }
  })

/** A free loopback port (for servers that cannot be told to pick one themselves). */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const s = createServer()
    s.once("error", reject)
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port
      s.close(() => resolve(port))
    })
  })

const CLK_TCK = 100

export interface ProcSample {
  /** User + system CPU time so far, ms. */
  readonly cpuMs: number
  /**
   * The same for the main thread alone (the task whose id is the pid): the event loop. A target whose
   * main thread runs near one core is bound by it, whatever its other threads (the store worker,
   * libuv's pool, V8's helpers) still have to spare.
   */
  readonly mainCpuMs: number
  /** Each live thread's CPU time so far, ms, by thread id (the main thread's included). */
  readonly threadCpuMs: ReadonlyMap<number, number>
  readonly rssMb: number
  /** Peak RSS so far (VmHWM), MB. */
  readonly peakRssMb: number
}

const cpuTicks = (statFile: string): number => {
  const stat = readFileSync(statFile, "utf8")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return Number(fields[11]) + Number(fields[12])
}

const threadTicks = (pid: number): Map<number, number> => {
  const out = new Map<number, number>()
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      out.set(Number(tid), (cpuTicks(`/proc/${pid}/task/${tid}/stat`) * 1000) / CLK_TCK)
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return out
}

/** CPU time (the process's, its main thread's, each thread's) and memory of a process, from /proc (Linux). */
export const sampleProc = (pid: number): ProcSample => {
  try {
    // The threads first, the process's total after: the total then covers at least what the threads
    // were read at, so the split's "rest" (total − main − busiest) does not come out below zero.
    const threadCpuMs = threadTicks(pid)
    const ticks = cpuTicks(`/proc/${pid}/stat`)
    const status = readFileSync(`/proc/${pid}/status`, "utf8")
    const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, "m").exec(status)?.[1] ?? NaN)
    return { cpuMs: (ticks * 1000) / CLK_TCK, mainCpuMs: threadCpuMs.get(pid) ?? NaN, threadCpuMs, rssMb: kb("VmRSS") / 1024, peakRssMb: kb("VmHWM") / 1024 }
  } catch {
    return { cpuMs: NaN, mainCpuMs: NaN, threadCpuMs: new Map(), rssMb: NaN, peakRssMb: NaN }
  }
}

/**
 * One sample of a target run as several processes (`pids`, the first the target's own: bench/targets/
 * tollgatePg.ts's instances), read as one process whose threads are all of theirs: CPU summed, the
 * first's main thread the main one, every other process's threads among the others (so `cpuSplit`'s
 * busiest other thread is, under load, the second instance's event loop — as with worker threads).
 */
export const sampleProcs = (pids: ReadonlyArray<number>): ProcSample => {
  const samples = pids.map(sampleProc)
  const threadCpuMs = new Map<number, number>()
  for (const s of samples) for (const [tid, ms] of s.threadCpuMs) threadCpuMs.set(tid, ms)
  const sum = (pick: (s: ProcSample) => number) => samples.reduce((n, s) => n + pick(s), 0)
  return { cpuMs: sum((s) => s.cpuMs), mainCpuMs: samples[0]!.mainCpuMs, threadCpuMs, rssMb: sum((s) => s.rssMb), peakRssMb: sum((s) => s.peakRssMb) }
}

/**
 * CPU ms between two samples of one process, split three ways (the kernel counts in 10 ms ticks per
 * thread, so a phase needs seconds of CPU before its split per call means anything: read it for the
 * loaded phases, not the one-caller ones): the main thread, the busiest other
 * thread (in a governed target, the store worker: it runs every transaction and costs several times
 * any other thread), and the rest (V8's platform threads — the garbage collector's helpers — libuv's
 * pool, and threads that ended in between).
 */
export const cpuSplit = (pid: number, before: ProcSample, after: ProcSample): { readonly main: number; readonly busiestOther: number; readonly rest: number } => {
  const main = after.mainCpuMs - before.mainCpuMs
  let busiestOther = 0
  for (const [tid, ms] of after.threadCpuMs) {
    if (tid !== pid) busiestOther = Math.max(busiestOther, ms - (before.threadCpuMs.get(tid) ?? 0))
  }
  return { main, busiestOther, rest: after.cpuMs - before.cpuMs - main - busiestOther }
}

/**
 * bench/targets/splice.mjs — the bench's TCP balancer, in its own process — in front of `ports`
 * (round robin, or with `affinity` by a connection's first key), on `port` or an ephemeral one. Found
 * under the working directory's bench/targets, so a bundled target finds it as one run from sources.
 */
export const startBalancer = (ports: ReadonlyArray<number>, o: { readonly affinity?: boolean; readonly port?: string } = {}): Promise<Child<{ port: number }>> =>
  startChild<{ port: number }>("balancer", process.execPath, [
    join(process.cwd(), "bench", "targets", "splice.mjs"),
    "--ports",
    ports.join(","),
    ...(o.affinity === true ? ["--affinity"] : []),
    ...(o.port === undefined ? [] : ["--port", o.port])
  ])

/**
 * A report a bench preload in a child writes to `file` when it gets SIGUSR2 (bench/lib/gcObserver.mjs): sent, then read as soon as the file holds whole JSON.
 */
export const signalForJson = async <T>(pid: number, file: string, timeoutMs = 10_000): Promise<T> => {
  rmSync(file, { force: true })
  process.kill(pid, "SIGUSR2")
  for (let waited = 0; waited < timeoutMs; waited += 20) {
    await new Promise((r) => setTimeout(r, 20))
    try {
      return JSON.parse(readFileSync(file, "utf8")) as T
    } catch {
      // not written yet, or not whole yet
    }
  }
  throw new Error(`process ${pid} wrote no report to ${file} within ${timeoutMs} ms`)
}
