import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { base32Of, newReceiptId, newRequestId, newReservationId, randomBase32 } from "../../src/domain/ids.ts"

/** The reference: the bytes as one bit string, cut in fives from the left, the last group padded with zeros. */
const base32Reference = (bytes: Uint8Array): string => {
  const bits = Array.from(bytes, (b) => b.toString(2).padStart(8, "0")).join("")
  let out = ""
  for (let i = 0; i < bits.length; i += 5) out += "abcdefghijklmnopqrstuvwxyz234567"[parseInt(bits.slice(i, i + 5).padEnd(5, "0"), 2)]
  return out
}

describe("base32", () => {
  it("is the bytes' bits five at a time in lowercase base32, the last group zero-padded, whatever the length", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 80 }), (bytes) => {
        expect(base32Of(bytes)).toBe(base32Reference(bytes))
      })
    )
  })

  it("a random string is as long as its bytes' base32 and built of its alphabet", () => {
    for (const n of [1, 10, 15, 20, 64]) expect(randomBase32(n)).toMatch(new RegExp(`^[a-z2-7]{${Math.ceil((n * 8) / 5)}}$`))
  })
})

describe("timed ids (requests, reservations, receipts)", () => {
  it("an id made at a later millisecond sorts after one made earlier (rows append to their indexes)", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 48 }), fc.integer({ min: 1, max: 10 ** 9 }), (t, dt) => {
        for (const make of [newRequestId, newReservationId, newReceiptId]) expect(make(t) < make(t + dt)).toBe(true)
      })
    )
  })

  it("begin with their time: 10 characters of 5 bits each, most significant first, in an alphabet sorted as ASCII", () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 50 - 1 }), (t) => {
        let expected = ""
        for (let rest = t, i = 0; i < 10; i++, rest = Math.floor(rest / 32)) expected = "234567abcdefghijklmnopqrstuvwxyz"[rest % 32] + expected
        expect(newReservationId(t).slice("rsv_".length, "rsv_".length + 10)).toBe(expected)
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
