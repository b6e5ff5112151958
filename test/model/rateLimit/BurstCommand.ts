/**
 * N requests of one project arrive at the same instant, concurrently: admitted exactly as many as
 * GCRA admits one after another (the limiter's check-and-set must not let a race through).
 */
import { Effect, Exit } from "effect"
import { expect } from "vitest"
import { checkGcra } from "../../../spec/rateLimit.ts"
import { RateLimiter } from "../../../src/services/RateLimiter.ts"
import { nowMillis, runExit } from "../support/runtime.ts"
import { checkInvariants, type RateCommand, type RateModel, type RateReal } from "./model.ts"

export class BurstCommand implements RateCommand {
  constructor(readonly project: number, readonly n: number) {}
  check = () => true as const
  async run(m: RateModel, r: RateReal): Promise<void> {
    const limit = r.limits[this.project]!
    const projectId = r.projects[this.project]!
    const now = await nowMillis(r.rt)
    const exits = await Promise.all(Array.from({ length: this.n }, () => runExit(r.rt, Effect.flatMap(RateLimiter, (l) => l.admit(projectId, limit)))))
    let admitted = 0
    for (let i = 0; i < this.n; i++) {
      const d = checkGcra(m.tat.get(this.project) ?? 0, limit, now * 1000)
      if (d._tag === "Allowed") {
        admitted++
        m.tat.set(this.project, d.state)
        m.admittedAtMicros.set(this.project, [...(m.admittedAtMicros.get(this.project) ?? []), now * 1000])
      }
    }
    expect(exits.filter(Exit.isSuccess).length).toBe(admitted)
    r.coverage.hit("Burst", admitted === this.n ? "AllAdmitted" : admitted === 0 ? "AllLimited" : "Partial")
    checkInvariants(m, r)
  }
  toString = () => `Burst(p${this.project}, ${this.n})`
}
