/**
 * A governed call in flight, as one object: its phase, its plan once its hold is reserved, how to stop
 * it, a stream's progress mark, whether it was answered. The Gateway keeps every call it took in one
 * registry (`Calls`) until the call is both answered and done with its hold; the keep-alive, the
 * heartbeat, `inFlight` and shutdown read that registry and nothing else.
 *
 * Its phases and the only moves between them:
 *
 *   planning ──► reserving ──► reserved ──► upstream ──► settling ──► settled
 *      │  ▲          │            │            │            │
 *      │  └──────────┤            └────────────┴────────────┴──────► voided
 *      └─────────────┴──► declined (answered with no hold: a refusal, a replay, a defect)
 *
 * `reserving → planning`: a claim held by an original in flight that was released while the call
 * waited; the call plans again from the top. Every move is asserted, always (the cost is a lookup):
 * a move not in the table — a settled call voided, a hold settled twice — throws a `LifecycleViolation`
 * before anything reaches the store. So is the answer: a call is answered once; a second answer is
 * dropped, logged and counted, and thrown in assertion mode (TOLLGATE_ASSERT).
 */
import { type Clock, Effect, type Exit, Runtime, type Tracer } from "effect"
import type { GovernanceError } from "../../domain/errors.ts"
import type { ProgressMark } from "../../store/epochs.ts"
import type { ChatCall, GatewayReply, Plan } from "./types.ts"

export type Phase = "planning" | "reserving" | "reserved" | "upstream" | "settling" | "settled" | "voided" | "declined"

const MOVES: { readonly [P in Phase]: ReadonlyArray<Phase> } = {
  planning: ["reserving", "declined"],
  reserving: ["reserved", "planning", "declined"],
  reserved: ["upstream", "voided"],
  upstream: ["settling", "voided"],
  settling: ["settled", "voided"],
  settled: [],
  voided: [],
  declined: []
}

/** The phases in which the call holds a committed reservation (the keep-alive pushes it ahead). */
const HOLDING: ReadonlySet<Phase> = new Set<Phase>(["reserved", "upstream", "settling"])
const DONE: ReadonlySet<Phase> = new Set<Phase>(["settled", "voided", "declined"])

/** A move the lifecycle does not allow, or a second answer: a bug of the gateway's, never the client's. */
export class LifecycleViolation extends Error {
  override readonly name = "LifecycleViolation"
  constructor(message: string, readonly kind: "move" | "answer" = "move") {
    super(message)
  }
}

export type Answer = Exit.Exit<GatewayReply, GovernanceError>

/** What the registry is told when a call breaks the lifecycle (src/services/Gateway.ts counts and logs it). */
export interface Violations {
  readonly report: (violation: LifecycleViolation) => void
  /** Throw a second answer's violation too (assertion mode); a move's violation always throws. */
  readonly strict: boolean
}

export class InFlight {
  private phase_: Phase = "planning"
  private plan_: Plan | undefined = undefined
  private answered_ = false
  /** How shutdown stops the call now: a leg's upstream abort, a stream's stop. */
  stop: (() => void) | undefined = undefined
  /** An open stream's progress, read by the heartbeat. */
  progress: (() => ProgressMark | undefined) | undefined = undefined
  /** A stream answered from its upstream's open: it settles its own hold, however its fiber ends. */
  delivering = false

  constructor(
    readonly call: ChatCall,
    private readonly registry: Calls,
    /** The caller's runtime and clock: the call's effects and callbacks run with them. */
    readonly runtime: Runtime.Runtime<never>,
    readonly clock: Clock.Clock,
    /** The call's span (`tollgate.governed_call`), when traces are exported. */
    readonly span: Tracer.Span | undefined
  ) {}

  get phase(): Phase {
    return this.phase_
  }
  get answered(): boolean {
    return this.answered_
  }
  /** The call's plan: set once its reservation committed. */
  get plan(): Plan {
    const p = this.plan_
    if (p === undefined) throw new LifecycleViolation(`a ${this.phase_} call has no plan`)
    return p
  }
  get holds(): boolean {
    return HOLDING.has(this.phase_)
  }

  /** Move to `next`; throws a `LifecycleViolation` when the lifecycle has no such move. */
  to(next: Phase): void {
    if (!MOVES[this.phase_].includes(next)) {
      const violation = new LifecycleViolation(`a governed call moved from ${this.phase_} to ${next}${this.plan_ === undefined ? "" : ` (request ${this.plan_.requestId})`}`)
      this.registry.violations.report(violation)
      throw violation
    }
    this.phase_ = next
    if (DONE.has(next)) {
      this.stop = undefined
      this.progress = undefined
      // Its upstream limits' slots back; a declined call never reached the upstream: its tokens too. A
      // settled call corrected its tokens first (settlement.ts); a voided one keeps its estimate taken.
      this.call.limitsTaken?.end(next === "declined" ? 0 : undefined, this.clock.unsafeCurrentTimeMillis())
      this.registry.settle(this)
    }
  }

  /** The reservation committed: the call holds `plan` from here. */
  reserved(plan: Plan): void {
    this.to("reserved")
    this.plan_ = plan
  }

  /** Answer the client, once. */
  answer(answer: Answer): void {
    if (this.answered_) {
      const violation = new LifecycleViolation(`a governed call was answered twice (${this.phase_}${this.plan_ === undefined ? "" : `, request ${this.plan_.requestId}`})`, "answer")
      this.registry.violations.report(violation)
      if (this.registry.violations.strict) throw violation
      return
    }
    this.answered_ = true
    endSpan(this, this.span, answer)
    this.call.deliver(answer)
    this.registry.settle(this)
  }

  /** Answered, and nothing of its hold left to do: out of the registry. */
  get finished(): boolean {
    return this.answered_ && DONE.has(this.phase_)
  }
}

/** Every call the Gateway took and has not finished, and what it tells about them. */
export class Calls {
  private readonly live = new Set<InFlight>()

  constructor(readonly violations: Violations) {}

  add(f: InFlight): void {
    this.live.add(f)
  }
  /** Drop a finished call. */
  settle(f: InFlight): void {
    if (f.finished) this.live.delete(f)
  }
  get size(): number {
    return this.live.size
  }
  /** The calls that hold a committed reservation now. */
  holding(): Array<InFlight> {
    const out: Array<InFlight> = []
    for (const f of this.live) if (f.holds) out.push(f)
    return out
  }
  /** Stop every call that can be stopped now (shutdown past its grace). */
  stopAll(): void {
    for (const f of Array.from(this.live)) f.stop?.()
  }
  /** The open streams' progress marks that changed. */
  marks(): Array<{ readonly reservationId: string; readonly mark: ProgressMark }> {
    const out: Array<{ reservationId: string; mark: ProgressMark }> = []
    for (const f of this.live) {
      const mark = f.progress?.()
      if (mark !== undefined) out.push({ reservationId: f.plan.hold.reservationId, mark })
    }
    return out
  }
}

/** A span of the call's, a child of its own, started now; nothing when traces are not exported. */
export const childSpan = (
  f: InFlight,
  name: string,
  attributes: () => Record<string, unknown>,
  kind: Tracer.SpanKind = "internal"
): Tracer.Span | undefined =>
  // The attributes are built only when traced: an untraced call (the hot path) allocates nothing here.
  f.span === undefined ? undefined : Runtime.runSync(f.runtime)(Effect.makeSpan(name, { parent: f.span, kind, attributes: attributes() }))

/** End a span of the call's (nothing when traces are not exported) with how the step ended. */
export const endSpan = (f: InFlight, span: Tracer.Span | undefined, exit: Exit.Exit<unknown, unknown>): void => {
  if (span !== undefined) span.end(f.clock.unsafeCurrentTimeNanos(), exit)
}
