import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { newReceiptId, newRequestId, newReservationId } from "../../src/domain/ids.ts"

describe("timed ids (requests, reservations, receipts)", () => {
  it("an id made at a later millisecond sorts after one made earlier (rows append to their indexes)", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 48 }), fc.integer({ min: 1, max: 10 ** 9 }), (t, dt) => {
        for (const make of [newRequestId, newReservationId, newReceiptId]) expect(make(t) < make(t + dt)).toBe(true)
      })
    )
  })

  it("are a prefix, 10 time characters and 16 random ones, URL-safe and unique", () => {
    const now = Date.parse("2026-11-22T15:00:00Z")
    const ids = Array.from({ length: 5000 }, () => newRequestId(now))
    for (const id of ids) expect(id).toMatch(/^req_[a-z2-7]{26}$/)
    expect(new Set(ids).size).toBe(ids.length)
    expect(newReceiptId(now)).toMatch(/^rcpt_[a-z2-7]{26}$/)
  })
})
