/**
 * TEST ONLY: the fault hook of the crash harness (test/crash/), in domain/ (the lowest layer) so the
 * store and the services can both call it. With TOLLGATE_TEST_CRASH_AT=<phase>[:<n>] in its environment, the process SIGKILLs itself (no finalizer, no flush: a crash) the n-th time
 * (default the first) a governed call reaches <phase>:
 *
 * - `claim`: inside the reservation transaction, after the idempotency claim, before its COMMIT;
 * - `reserved`: after the reservation transaction committed, before the upstream call;
 * - `settled`: after the settlement transaction committed, before the response is sent.
 *
 * Unset — always, outside the harness — `crashPoint` is a function that does nothing. Each thread
 * counts its own hits (the claim runs in the store worker).
 */
export type CrashPhase = "claim" | "reserved" | "settled"

const spec = process.env.TOLLGATE_TEST_CRASH_AT

const armed = (spec: string): ((phase: CrashPhase) => void) => {
  const [phase, nth] = spec.split(":")
  let left = Math.max(1, Number(nth ?? "1") || 1)
  return (at) => {
    if (at === phase && --left === 0) process.kill(process.pid, "SIGKILL")
  }
}

export const crashPoint: (phase: CrashPhase) => void = spec === undefined || spec === "" ? () => {} : armed(spec)
