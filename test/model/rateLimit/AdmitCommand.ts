/** One request arrives: admitted (limit, remaining, reset) or 429 (Retry-After) exactly as GCRA says. */
import { Effect, Exit } from "effect"
import { expect } from "vitest"
import { checkGcra } from "../../../spec/rateLimit.ts"
import { RateLimiter } from "../../../src/services/RateLimiter.ts"
import { nowMillis, run, runExit } from "../support/runtime.ts"
import { localLimiter } from "../../support/runtime.ts"
import { checkInvariants, type RateCommand, type RateModel, type RateReal } from "./model.ts"

export class AdmitCommand implements RateCommand {
  constructor(readonly project: number) {}
  check = () => true as const
  async run(m: RateModel, r: RateReal): Promise<void> {
    const limit = r.limits[this.project]!
    const projectId = r.projects[this.project]!
    const now = await nowMillis(r.rt)
    const peeked = await run(r.rt, Effect.flatMap(localLimiter, (l) => l.peek(projectId, limit)))
    const exit = await runExit(r.rt, Effect.flatMap(RateLimiter, (l) => l.admit(projectId, limit)))
    const decision = checkGcra(m.tat.get(this.project) ?? 0, limit, now * 1000)
    r.coverage.hit("Admit", decision._tag)
    expect(peeked).toBe(decision._tag === "Allowed")
    if (decision._tag === "Allowed") {
      expect(Exit.isSuccess(exit) ? exit.value : String(exit)).toEqual({ limit: limit.requestsPerMinute, remaining: decision.remaining, resetMs: decision.resetMicros / 1000 })
      m.tat.set(this.project, decision.state)
      m.admittedAtMicros.set(this.project, [...(m.admittedAtMicros.get(this.project) ?? []), now * 1000])
    } else {
      expect(Exit.isFailure(exit) && exit.cause._tag === "Fail" && exit.cause.error._tag === "RateLimited" ? exit.cause.error.retryAfterMs : String(exit)).toBe(Math.ceil(decision.retryAfterMicros / 1000))
    }
    checkInvariants(m, r)
  }
  toString = () => `Admit(p${this.project})`
}
