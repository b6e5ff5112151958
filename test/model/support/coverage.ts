/**
 * Coverage of a model run: how often each command ran and which outcome it met, so a model that
 * never reaches an interesting state (e.g. a settle that never follows a reserve) is visible.
 * Printed after every property in deep mode (and in fast mode when TOLLGATE_MODEL_VERBOSE is set).
 */
import { deep } from "./profile.ts"

export class Coverage {
  private readonly counts = new Map<string, number>()
  runs = 0
  commands = 0
  private readonly startedAt = Date.now()

  constructor(readonly model: string) {}

  /** Count one command run, with the outcome it met ("Reserve:Reserved", "Reserve:BudgetExceeded"). */
  hit(command: string, outcome?: string): void {
    this.commands++
    const key = outcome === undefined ? command : `${command}:${outcome}`
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1)
  }

  count(key: string): number {
    let n = 0
    for (const [k, v] of this.counts) if (k === key || k.startsWith(`${key}:`)) n += v
    return n
  }

  report(): string {
    const seconds = ((Date.now() - this.startedAt) / 1000).toFixed(1)
    const width = Math.max(...[...this.counts.keys()].map((k) => k.length), 10)
    const lines = [...this.counts.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, v]) => `    ${k.padEnd(width)}  ${String(v).padStart(9)}`)
    return [`[model] ${this.model}: ${this.runs} runs, ${this.commands} commands, ${seconds}s`, ...lines].join("\n")
  }

  print(): void {
    if (deep || process.env["TOLLGATE_MODEL_VERBOSE"]) process.stdout.write(this.report() + "\n")
  }
}
