/**
 * The rulebook's checkers over stored rows (spec/ledger.ts `checkWindow`, `checkLedgerRows`), each
 * shown to fire on a planted violation and to stay quiet on sound rows — the audit, the models and
 * assertion mode all rely on them.
 */
import { describe, expect, it } from "vitest"
import * as Ledger from "../../spec/ledger.ts"
import { checkLedgerRows, checkWindow, grandfatheredOnRows, type LedgerRows } from "../../spec/ledger.ts"

const H = (n: number) => String(n).padStart(64, "0")
const GENESIS = "0".repeat(64)

/** Sound rows: a window with one settled call (charge 30 of 50), one held (20), one voided (10); cap 100. */
const sound: LedgerRows = {
  projects: [{ id: "p", cap: 100, capChangedAt: 0 }],
  windows: [{ project: "p", period: "2026-01", spent: 30, reserved: 20 }],
  reservations: [
    { id: "r1", requestId: "q1", project: "p", period: "2026-01", amount: 50, state: "settled", charge: 30, createdAt: 10 },
    { id: "r2", requestId: "q2", project: "p", period: "2026-01", amount: 20, state: "held", charge: null, createdAt: 11 },
    { id: "r3", requestId: "q3", project: "p", period: "2026-01", amount: 10, state: "voided", charge: 0, createdAt: 12 }
  ],
  receipts: [{ requestId: "q1", project: "p", period: "2026-01", seq: 1, charge: 30, prevHash: GENESIS, hash: H(1) }]
}

const invariantsOf = (rows: LedgerRows) => [...new Set(checkLedgerRows(rows).map((f) => f.invariant))].sort()

describe("checkLedgerRows", () => {
  it("finds nothing on sound rows", () => {
    expect(checkLedgerRows(sound)).toEqual([])
  })

  it("spent-equals-receipts fires when spent and the receipts disagree", () => {
    expect(invariantsOf({ ...sound, windows: [{ ...sound.windows[0]!, spent: 31 }] })).toEqual(["spent-equals-receipts"])
  })

  it("reserved-equals-held fires when reserved and the held holds disagree", () => {
    expect(invariantsOf({ ...sound, windows: [{ ...sound.windows[0]!, reserved: 19 }] })).toEqual(["reserved-equals-held"])
  })

  it("no-overspend fires at cap + 1 and not at the cap (spent + reserved ≤ cap is the boundary)", () => {
    const at = (cap: number) => ({ ...sound, projects: [{ id: "p", cap, capChangedAt: undefined }] })
    expect(checkLedgerRows(at(50))).toEqual([])
    expect(invariantsOf(at(49))).toEqual(["no-overspend"])
  })

  it("no-overspend: a cap lowered under the commitments is grandfathered only until a hold is made after the change", () => {
    const lowered = (capChangedAt: number) => ({ ...sound, projects: [{ id: "p", cap: 40, capChangedAt }] })
    // Lowered after the last hold (12): the commitments predate it, honoured.
    expect(checkLedgerRows(lowered(12))).toEqual([])
    expect(checkLedgerRows(lowered(100))).toEqual([])
    // A hold made after the change had to fit under the new cap: over the cap now is a fault.
    expect(invariantsOf(lowered(11))).toEqual(["no-overspend"])
    expect(grandfatheredOnRows(undefined, 5)).toBe(false)
    expect(grandfatheredOnRows(5, undefined)).toBe(true)
  })

  it("no-overspend also reads the rows, not only the stored sums", () => {
    // Stored sums within the cap, but the receipts and holds commit more.
    const rows: LedgerRows = {
      ...sound,
      projects: [{ id: "p", cap: 50, capChangedAt: undefined }],
      windows: [{ project: "p", period: "2026-01", spent: 30, reserved: 20 }],
      reservations: [...sound.reservations, { id: "r4", requestId: "q4", project: "p", period: "2026-01", amount: 5, state: "held", charge: null, createdAt: 13 }]
    }
    expect(invariantsOf(rows)).toEqual(["no-overspend", "reserved-equals-held"])
  })

  it("charge-within-reservation fires on a charge over the hold, a charged void, a charged hold", () => {
    const with1 = (patch: Partial<LedgerRows["reservations"][number]>) => ({ ...sound, reservations: [{ ...sound.reservations[0]!, ...patch }, ...sound.reservations.slice(1)] })
    expect(invariantsOf(with1({ amount: 29 }))).toContain("charge-within-reservation")
    expect(invariantsOf({ ...sound, reservations: [sound.reservations[0]!, sound.reservations[1]!, { ...sound.reservations[2]!, charge: 1 }] })).toEqual(["charge-within-reservation"])
    expect(invariantsOf({ ...sound, reservations: [sound.reservations[0]!, { ...sound.reservations[1]!, charge: 0 }, sound.reservations[2]!] })).toEqual(["charge-within-reservation"])
  })

  it("one-receipt-per-charge fires on a settled call without a receipt, a receipt for a void, two receipts, a receipt charging another amount", () => {
    expect(invariantsOf({ ...sound, receipts: [] })).toEqual(["one-receipt-per-charge", "spent-equals-receipts"])
    const extra = { requestId: "q3", project: "p", period: "2026-01", seq: 2, charge: 0, prevHash: H(1), hash: H(2) }
    expect(invariantsOf({ ...sound, receipts: [...sound.receipts, extra] })).toEqual(["one-receipt-per-charge"])
    expect(invariantsOf({ ...sound, receipts: [...sound.receipts, { ...extra, requestId: "q1" }] })).toEqual(["one-receipt-per-charge"])
    const other = { ...sound, receipts: [{ ...sound.receipts[0]!, charge: 29 }], windows: [{ ...sound.windows[0]!, spent: 29 }] }
    expect(invariantsOf(other)).toEqual(["one-receipt-per-charge"])
  })

  it("chain fires on a gap in seq, a broken prev_hash, a first receipt not on the genesis hash", () => {
    const second = { requestId: "q9", project: "p", period: "2026-02", seq: 2, charge: 0, prevHash: H(1), hash: H(2) }
    expect(checkLedgerRows({ ...sound, receipts: [...sound.receipts, second] }).filter((f) => f.invariant === "chain")).toEqual([])
    expect(invariantsOf({ ...sound, receipts: [...sound.receipts, { ...second, seq: 3 }] })).toContain("chain")
    expect(invariantsOf({ ...sound, receipts: [...sound.receipts, { ...second, prevHash: H(7) }] })).toContain("chain")
    expect(invariantsOf({ ...sound, receipts: [{ ...sound.receipts[0]!, prevHash: H(5) }] })).toEqual(["chain"])
  })

  it("reservation-has-account fires on a hold without its window row", () => {
    expect(invariantsOf({ ...sound, windows: [] })).toEqual(["reservation-has-account"])
  })
})

describe("checkWindow", () => {
  it("non-negative fires on a negative or fractional sum", () => {
    expect(checkWindow({ cap: 10, spent: -1, reserved: 0, receiptSum: -1, heldSum: 0 }).map((f) => f.invariant)).toEqual(["non-negative"])
    expect(checkWindow({ cap: 10, spent: 0.5, reserved: 0, receiptSum: 0.5, heldSum: 0 }).map((f) => f.invariant)).toEqual(["non-negative"])
  })
})

describe("the state checker (spec/ledger.ts violations) fires on each planted violation", () => {
  // A sound state: one project, one window, a settled reservation (30 of 50) and a held one (20).
  const base = (() => {
    let s = Ledger.setCap(Ledger.empty, "p", 100, "2026-01").state
    s = Ledger.reserve(s, "r1", "p", "2026-01", 50).state
    s = Ledger.settle(s, "r1", 30).state
    return Ledger.reserve(s, "r2", "p", "2026-01", 20).state
  })()
  const withReservation = (patch: Partial<Ledger.Reservation>, id = "r1"): Ledger.LedgerState => ({
    ...base,
    reservations: new Map(base.reservations).set(id, { ...base.reservations.get(id)!, ...patch })
  })

  it("is quiet on a sound state", () => {
    expect(Ledger.violations(base)).toEqual([])
  })
  it("non-negative: a fractional amount or a negative charge", () => {
    expect(Ledger.invariants(withReservation({ amount: 50.5 }))).toContain("non-negative")
    expect(Ledger.invariants(withReservation({ charge: -1 }))).toContain("non-negative")
  })
  it("charge-within-reservation: a settled charge over its hold, or none at all", () => {
    expect(Ledger.violations(withReservation({ amount: 29 }))).toContainEqual({ invariant: "charge-within-reservation", subject: "r1" })
    const { charge: _drop, ...noCharge } = base.reservations.get("r1")!
    expect(Ledger.violations({ ...base, reservations: new Map(base.reservations).set("r1", noCharge) })).toContainEqual({ invariant: "charge-within-reservation", subject: "r1" })
  })
  it("reservation-has-account: a reservation whose window has no account", () => {
    expect(Ledger.violations({ ...base, accounts: new Map() })).toContainEqual({ invariant: "reservation-has-account", subject: "r1" })
  })
  it("resolved-at-most-once: resolved twice, or a resolution of an unknown reservation", () => {
    const twice = { ...base, journal: [...base.journal, { kind: "void" as const, id: "r1", project: "p", period: "2026-01", amount: 50 }] }
    expect(Ledger.violations(twice)).toContainEqual({ invariant: "resolved-at-most-once", subject: "r1" })
    const ghost = { ...base, journal: [...base.journal, { kind: "void" as const, id: "r9", project: "p", period: "2026-01", amount: 1 }] }
    expect(Ledger.violations(ghost)).toEqual([{ invariant: "resolved-at-most-once", subject: "r9" }])
  })
  it("remaining and the Reserved outcome report cap − spent − reserved", () => {
    expect(Ledger.remaining(base, "p", "2026-01")).toBe(50)
    expect(Ledger.reserve(base, "r3", "p", "2026-01", 10).outcome).toMatchObject({ _tag: "Reserved", remaining: 40 })
    expect(Ledger.reserve(base, "r3", "p", "2026-01", 51).outcome).toMatchObject({ _tag: "BudgetExceeded", remaining: 50 })
  })
})

describe("row checker edges", () => {
  it("grandfathering needs a known cap change", () => {
    expect(grandfatheredOnRows(undefined, undefined)).toBe(false)
  })
  it("a chain handed over out of order is still one sound chain", () => {
    const second = { requestId: "q9", project: "p", period: "2026-02", seq: 2, charge: 0, prevHash: H(1), hash: H(2) }
    expect(checkLedgerRows({ ...sound, receipts: [second, ...sound.receipts] })).toEqual([])
  })
})
