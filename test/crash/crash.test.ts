/**
 * The crash harness (issue 19): the real server, SIGKILLed at each phase of a governed call, restarted
 * on the same store, across generated runs (seeded: TOLLGATE_CRASH_SEED; 20 runs, 100 under
 * TOLLGATE_DEEP=1, or TOLLGATE_CRASH_RUNS). Phases:
 *
 * - claim:    inside the reservation transaction, after the idempotency claim, before COMMIT (fault hook)
 * - reserved: after the reservation committed, before the upstream call (fault hook)
 * - upstream: while the upstream works on the call (the harness kills when the mock received it)
 * - stream:   mid-stream, after tokens were delivered (the harness kills when a client has read them)
 * - settled:  after the settlement committed, before the response (fault hook)
 *
 * After every restart, before anything else is sent, the store must show: nothing held, reserved 0,
 * no idempotency claim in flight, no pending request; every charge a client was answered is in the
 * store (its receipt, the same Credits); no idempotency key charged twice; a stream that delivered
 * tokens at least three heartbeats before the kill charged for them; `tollgate audit` clean. Then the
 * calls the crash cut are retried with their idempotency keys: each must be answered 200 (run again,
 * or replayed), never a 409.
 */
import { describe, expect, it } from "vitest"
import { type Answer, audit, type CallSpec, callSpec, governedCall, type Proc, prng, spawnGateway, storeState } from "./support.ts"
import { useHarness } from "./harness.ts"

const DEEP = process.env.TOLLGATE_DEEP === "1"
const RUNS = Number(process.env.TOLLGATE_CRASH_RUNS ?? (DEEP ? 100 : 20))
const SEED = Number(process.env.TOLLGATE_CRASH_SEED ?? 19)
const PHASES = ["claim", "reserved", "upstream", "stream", "settled"] as const
type Phase = (typeof PHASES)[number]
const HEARTBEAT_MS = 100

interface Tracked {
  readonly spec: CallSpec
  /** The answer with its charge's evidence, once the client has one. */
  answer: Answer | undefined
  /** A stream the crash cut after the client had read tokens for at least three heartbeats. */
  mustBeCharged: boolean
}

describe("crash harness: SIGKILL at each phase of a governed call, restart, recover", () => {
  const harness = useHarness()

  it(`${RUNS} generated runs (seed ${SEED}): no answered charge lost, none twice, holds and claims freed at restart, audit clean`, async () => {
    const { main, upstream, store } = harness
    const rnd = prng(SEED)
    const calls = new Map<string, Tracked>()
    const perPhase = Object.fromEntries(PHASES.map((p) => [p, { runs: 0, killed: 0, cutCalls: 0, resolvedAtRestart: 0 }])) as Record<
      Phase,
      { runs: number; killed: number; cutCalls: number; resolvedAtRestart: number }
    >
    const restartMs: Array<number> = []
    const retries: Array<{ status: Answer["status"]; ms: number; replayed: boolean }> = []
    const anomalies: Array<string> = []
    let devKey: string | undefined
    let previous: Phase | undefined

    for (let run = 0; run <= RUNS; run++) {
      const last = run === RUNS
      const phase: Phase | undefined = last ? undefined : PHASES[run % PHASES.length]!
      const fresh = last ? 0 : rnd.int(3, 6)
      const hooked = phase === "claim" || phase === "reserved" || phase === "settled"
      // Which hit of the phase crashes (the retries of earlier runs count too).
      const nth = hooked ? rnd.int(1, fresh) : 0
      upstream.setBehavior(phase === "upstream" ? { delayMs: 400 } : phase === "stream" ? { chunkDelayMs: 120 } : { delayMs: 5 })

      // What the dead process left, before the restart resolves it.
      const before = run === 0 ? undefined : storeState(store.dbPath)
      const proc: Proc = await spawnGateway(main, store, hooked ? { TOLLGATE_TEST_CRASH_AT: `${phase}:${nth}` } : {})
      devKey ??= proc.devKey
      expect(devKey).toBeDefined()

      if (before !== undefined) {
        // Recovery runs before the server listens: the first look after it must find nothing held.
        const after = storeState(store.dbPath)
        restartMs.push(proc.startMs)
        perPhase[previous!].resolvedAtRestart += before.held
        expect({ held: after.held, reserved: after.reserved, inFlightClaims: after.inFlightClaims, pending: after.pending }).toEqual({ held: 0, reserved: 0, inFlightClaims: 0, pending: 0 })
        expect(after.doubleCharged).toEqual([])
        const receipts = new Map(after.receipts.map((r) => [r.id, r]))
        for (const t of calls.values()) {
          if (t.answer?.governance !== undefined) {
            const r = receipts.get(t.answer.governance.receipt_id)
            expect(r, `receipt of ${t.spec.key}`).toBeDefined()
            expect(r!.credits_charged).toBe(t.answer.governance.credits_charged)
            expect(r!.key).toBe(t.spec.key)
          }
          if (t.mustBeCharged) {
            const charged = after.receipts.find((r) => r.key === t.spec.key)
            expect(charged?.output_tokens ?? 0, `delivered tokens of ${t.spec.key} charged`).toBeGreaterThan(0)
          }
        }
        const audited = await audit(store.dbPath)
        expect(audited.findings, JSON.stringify(audited.findings.slice(0, 3))).toEqual([])
        expect(audited.summary.clean).toBe(true)
      }

      // The calls of this run: the ones a crash cut (retried with their keys), then new ones.
      const retried = Array.from(calls.values()).filter((t) => t.answer === undefined)
      const news: Array<Tracked> = Array.from({ length: fresh }, (_, i) => {
        const stream = phase === "stream" && i === 0 ? true : rnd.next() < 0.4
        const t: Tracked = { spec: callSpec(`run${run}-call${i}-${SEED}`, stream), answer: undefined, mustBeCharged: false }
        calls.set(t.spec.key, t)
        return t
      })
      let killedAt: number | undefined
      const kill = () => {
        if (killedAt !== undefined) return
        killedAt = performance.now()
        proc.child.kill("SIGKILL")
      }
      const upstreamCallsBefore = upstream.calls
      const killAfter = phase === "upstream" ? rnd.int(1, fresh) : phase === "stream" ? rnd.int(1, 3) : 0
      const watch =
        phase === "upstream"
          ? setInterval(() => {
              if (upstream.calls - upstreamCallsBefore >= killAfter) kill()
            }, 5)
          : undefined
      const onContent = (chunks: number, firstAt: number) => {
        if (phase === "stream" && chunks >= killAfter && performance.now() - firstAt >= 3.5 * HEARTBEAT_MS) kill()
      }
      const answers = await Promise.all(
        [...retried, ...news].map(async (t) => ({ t, retry: retried.includes(t), answer: await governedCall(proc.origin, devKey!, t.spec, onContent) }))
      )
      if (watch !== undefined) clearInterval(watch)

      // Every call is over: the process died by its hook or our kill; make sure it is gone.
      if (!last) {
        const died = await Promise.race([proc.exited, new Promise<undefined>((r) => setTimeout(() => r(undefined), 3_000))])
        if (died === undefined) kill()
        const exit = await proc.exited
        expect(exit.signal).toBe("SIGKILL")
        perPhase[phase!].runs++
        if (died !== undefined || killedAt !== undefined) perPhase[phase!].killed++
      }

      for (const { t, retry, answer } of answers) {
        if (retry && answer.status !== "cut") retries.push({ status: answer.status, ms: answer.ms, replayed: answer.replayed })
        if (answer.status === "cut") {
          if (phase !== undefined) perPhase[phase].cutCalls++
          if (t.spec.stream && answer.firstContentAt !== undefined && killedAt !== undefined && killedAt - answer.firstContentAt >= 3 * HEARTBEAT_MS) t.mustBeCharged = true
          continue
        }
        if (answer.status !== 200) {
          anomalies.push(`${t.spec.key}: ${answer.status} ${answer.errorCode}`)
          continue
        }
        if (answer.governance !== undefined) t.answer = answer
        // A stream cut after its headers (status 200, no governance) is retried like a cut call.
      }
      previous = phase

      if (last) {
        expect(Array.from(calls.values()).filter((t) => t.answer === undefined).map((t) => t.spec.key)).toEqual([])
        const final = storeState(store.dbPath)
        expect({ held: final.held, reserved: final.reserved, doubleCharged: final.doubleCharged }).toEqual({ held: 0, reserved: 0, doubleCharged: [] })
        proc.child.kill("SIGTERM")
        expect((await proc.exited).code).toBe(0)
        expect((await audit(store.dbPath)).summary.clean).toBe(true)
      }
    }

    expect(anomalies).toEqual([])
    expect(retries.every((r) => r.status === 200)).toBe(true)
    const sorted = (xs: Array<number>) => [...xs].sort((a, b) => a - b)
    const pct = (xs: Array<number>, p: number) => sorted(xs)[Math.min(xs.length - 1, Math.floor(p * xs.length))] ?? 0
    const retryMs = retries.map((r) => r.ms)
    // The figures of the run, for the report.
    console.log(
      JSON.stringify({
        crashHarness: {
          seed: SEED,
          runs: RUNS,
          calls: calls.size,
          perPhase,
          streamsCutAfterDeliveryCheckedCharged: Array.from(calls.values()).filter((t) => t.mustBeCharged).length,
          restartToNothingHeldMs: { p50: Math.round(pct(restartMs, 0.5)), max: Math.round(Math.max(...restartMs)) },
          retriesOfCutCalls: {
            count: retries.length,
            replayed: retries.filter((r) => r.replayed).length,
            statuses: [...new Set(retries.map((r) => r.status))],
            p50Ms: Math.round(pct(retryMs, 0.5)),
            maxMs: Math.round(Math.max(0, ...retryMs))
          }
        }
      })
    )
    for (const p of PHASES) expect(perPhase[p].killed).toBe(perPhase[p].runs)
  }, 600_000)
})
