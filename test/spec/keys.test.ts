import fc from "fast-check"
import { describe, expect, it } from "vitest"
import * as Keys from "../../spec/keys.ts"
import { numRuns } from "./runs.ts"

const created = (id = "key_1", now = 0) => Keys.create(Keys.empty, id, "prj_a", "production", now).state

describe("keys examples", () => {
  it("a new key is valid; an unknown one is not", () => {
    const s = created()
    expect(Keys.authenticate(s, "key_1", 0)._tag).toBe("Valid")
    expect(Keys.authenticate(s, "key_2", 0)).toEqual({ _tag: "Unknown" })
    expect(Keys.create(s, "key_1", "prj_b", "staging", 1).outcome).toEqual({ _tag: "DuplicateKey", id: "key_1" })
  })

  it("rotation: the new key works at once, the old one for the default 86400 s grace", () => {
    const r = Keys.rotate(created(), "key_1", "key_2", 1000)
    expect(r.outcome).toMatchObject({ _tag: "Rotated", oldKeyExpiresAtMillis: 1000 + 86_400_000 })
    expect(r.outcome._tag === "Rotated" && r.outcome.newKey).toMatchObject({ id: "key_2", project: "prj_a", environment: "production", replaces: "key_1" })
    expect(Keys.authenticate(r.state, "key_2", 1000)._tag).toBe("Valid")
    expect(Keys.authenticate(r.state, "key_1", 1000 + 86_400_000 - 1)._tag).toBe("Valid")
    expect(Keys.authenticate(r.state, "key_1", 1000 + 86_400_000)._tag).toBe("Expired")
  })

  it("rotating a revoked or already rotated key is refused", () => {
    const rotated = Keys.rotate(created(), "key_1", "key_2", 0, 60).state
    expect(Keys.rotate(rotated, "key_1", "key_3", 1, 60).outcome).toEqual({ _tag: "AlreadyRotated", id: "key_1", replacedBy: "key_2" })
    const revoked = Keys.revoke(created(), "key_1").state
    expect(Keys.rotate(revoked, "key_1", "key_3", 1, 60).outcome).toEqual({ _tag: "KeyRevoked", id: "key_1" })
    expect(Keys.rotate(Keys.empty, "key_1", "key_3", 1, 60).outcome).toEqual({ _tag: "UnknownKey", id: "key_1" })
    expect(Keys.rotate(created(), "key_1", "key_1", 1, 60).outcome).toEqual({ _tag: "DuplicateKey", id: "key_1" })
    expect(Keys.rotate(created(), "key_1", "key_2", 1, -1).outcome).toEqual({ _tag: "InvalidGrace", graceSeconds: -1 })
  })

  it("revocation is immediate, also during a rotation grace", () => {
    const rotated = Keys.rotate(created(), "key_1", "key_2", 0, 60).state
    const revoked = Keys.revoke(rotated, "key_1")
    expect(revoked.outcome).toEqual({ _tag: "Revoked" })
    expect(Keys.authenticate(revoked.state, "key_1", 1)._tag).toBe("Revoked")
    expect(Keys.authenticate(revoked.state, "key_2", 1)._tag).toBe("Valid")
    expect(Keys.revoke(revoked.state, "key_1").outcome).toEqual({ _tag: "AlreadyRevoked", id: "key_1" })
  })
})

const ids = fc.constantFrom("key_1", "key_2", "key_3", "key_4", "key_5")
const time = fc.integer({ min: 0, max: 1e10 })
const command: fc.Arbitrary<Keys.Command> = fc.oneof(
  fc.record({ _tag: fc.constant("Create" as const), id: ids, project: fc.constantFrom("prj_a", "prj_b"), environment: fc.constant("production"), nowMillis: time }),
  fc.record({ _tag: fc.constant("Rotate" as const), id: ids, newId: ids, nowMillis: time, graceSeconds: fc.integer({ min: 0, max: 200_000 }) }),
  fc.record({ _tag: fc.constant("Revoke" as const), id: ids })
)
const commands = fc.array(command, { maxLength: 30 })

describe("keys properties", () => {
  it("keys: rotated key valid until grace then expired", () => {
    fc.assert(
      fc.property(time, fc.integer({ min: 0, max: 1e9 }), fc.integer({ min: 0, max: 10 * 86_400 }), fc.integer({ min: 0, max: 1e10 }), (t0, dt, grace, probeOffset) => {
        const at = t0 + dt
        const s = Keys.rotate(created("key_1", t0), "key_1", "key_2", at, grace).state
        const probe = at + probeOffset
        const expiresAt = at + grace * 1000
        expect(Keys.authenticate(s, "key_1", probe)._tag).toBe(probe < expiresAt ? "Valid" : "Expired")
        if (grace > 0) expect(Keys.authenticate(s, "key_1", expiresAt - 1)._tag).toBe("Valid")
        expect(Keys.authenticate(s, "key_1", expiresAt)._tag).toBe("Expired")
        expect(Keys.authenticate(s, "key_2", probe)._tag).toBe("Valid")
      }),
      { numRuns }
    )
  })

  it("keys: a revoked key never authenticates again, whatever follows", () => {
    fc.assert(
      fc.property(commands, commands, ids, time, (before, after, id, now) => {
        const s0 = before.reduce((s, c) => Keys.step(s, c).state, Keys.empty)
        const r = Keys.revoke(s0, id)
        fc.pre(r.outcome._tag === "Revoked")
        const s1 = after.reduce((s, c) => Keys.step(s, c).state, r.state)
        expect(Keys.authenticate(s1, id, now)._tag).toBe("Revoked")
      }),
      { numRuns }
    )
  })

  it("keys: a refused command changes nothing; only an active key can be rotated", () => {
    fc.assert(
      fc.property(commands, (cs) => {
        let s = Keys.empty
        for (const c of cs) {
          const r = Keys.step(s, c)
          const ok = ["Created", "Rotated", "Revoked"].includes(r.outcome._tag)
          if (!ok) expect(r.state).toBe(s)
          if (c._tag === "Rotate" && r.outcome._tag === "Rotated") expect(s.keys.get(c.id)?.status).toBe("active")
          s = r.state
        }
      }),
      { numRuns }
    )
  })

  it("keys: rotation chains are consistent (each rotated key points to its one replacement, which points back)", () => {
    fc.assert(
      fc.property(commands, (cs) => {
        const s = cs.reduce((st, c) => Keys.step(st, c).state, Keys.empty)
        for (const k of s.keys.values()) {
          if (k.replacedBy !== undefined) {
            const next = s.keys.get(k.replacedBy)
            expect(next?.replaces).toBe(k.id)
            expect([next?.project, next?.environment]).toEqual([k.project, k.environment])
            expect(k.expiresAtMillis).toBeDefined()
          }
          if (k.status === "rotated") expect(k.replacedBy).toBeDefined()
          if (k.status === "active") expect(k.replacedBy).toBeUndefined()
        }
      }),
      { numRuns }
    )
  })
})
