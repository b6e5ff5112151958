/** Property-test effort: a fast profile by default, a deep one when TOLLGATE_DEEP is set. */
export const numRuns = process.env["TOLLGATE_DEEP"] ? 10_000 : 200
