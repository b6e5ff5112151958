/** The loose JSON the adapter reads and writes: what it does not recognise it drops. */
export type Json = Record<string, unknown>

export const isObject = (u: unknown): u is Json => u !== null && typeof u === "object" && !Array.isArray(u)
export const num = (u: unknown): number | undefined => (typeof u === "number" && Number.isFinite(u) ? u : undefined)
