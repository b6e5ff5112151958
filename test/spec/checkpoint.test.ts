/**
 * spec/checkpoint.ts: checkpoints (C2SP tlog-checkpoint) as signed notes (C2SP signed-note).
 *
 * The interoperability vector is the signed note of golang.org/x/mod/sumdb/note's documentation and
 * tests (the "PeterNeumann" key, its private key text, the note it signs), typed in here: Ed25519 is
 * deterministic, so signing its text with its key must give its note byte for byte, and its verifier
 * key must open it.
 */
import fc from "fast-check"
import { createHash, createPrivateKey, generateKeyPairSync } from "node:crypto"
import { describe, expect, it } from "vitest"
import {
  type Checkpoint,
  keyHash,
  MAX_SIGNATURES,
  type NoteVerifier,
  noteSignerOfKey,
  noteVerifier,
  openCheckpoint,
  openNote,
  originOf,
  parseCheckpoint,
  parseVerifierKey,
  rawPublicKey,
  renderCheckpoint,
  signCheckpoint,
  signNote,
  verifierKey
} from "../../spec/checkpoint.ts"
import { leafHash, treeHead } from "../../spec/merkle.ts"

const GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
const GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
const GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
const GO_NOTE = `${GO_TEXT}\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n`

/** The Ed25519 private key whose seed the Go private key text holds (after its type byte 0x01). */
const goPrivateKey = () => {
  const typeAndSeed = Buffer.from(GO_SKEY.split("+").slice(4).join("+"), "base64")
  expect(typeAndSeed[0]).toBe(1)
  const pkcs8 = Buffer.concat([Buffer.from("302e020100300506032b657004220420", "hex"), typeAndSeed.subarray(1)])
  return createPrivateKey({ key: pkcs8, format: "der", type: "pkcs8" })
}

const keys = generateKeyPairSync("ed25519")
const other = generateKeyPairSync("ed25519")
const NAME = "rk_0123456789abcdef"
const signer = noteSignerOfKey(NAME, keys.privateKey)
const verifier = noteVerifier(NAME, keys.publicKey)
const ORIGIN = originOf("proj_1")

const leaves = Array.from({ length: 5 }, (_, i) => leafHash(Uint8Array.of(i)))
const cp: Checkpoint = { origin: ORIGIN, treeSize: 5, rootHash: treeHead(leaves), extensions: [] }
const signed = signCheckpoint(cp, [signer])

const BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
/** The base64 of 32 bytes with one of the two padding bits of its last digit set: the same bytes to a forgiving decoder. */
const looseSpelling = (b64: string): string => `${b64.slice(0, 42)}${BASE64[BASE64.indexOf(b64[42]!) + 1]}=`

const expectRefused = (result: { _tag: string; reason?: string }, reason: string): void => {
  expect(result._tag).toBe("Refused")
  expect(result.reason).toBe(reason)
}

describe("C2SP signed-note: the Go reference vector", () => {
  it("the key hash, the verifier key, the note signed byte for byte, and opened", () => {
    const priv = goPrivateKey()
    const raw = rawPublicKey(priv)
    expect(keyHash("PeterNeumann", raw).toString(16)).toBe("c74f20a3")
    expect(verifierKey("PeterNeumann", raw)).toBe(GO_VKEY)
    expect(signNote(GO_TEXT, [noteSignerOfKey("PeterNeumann", priv)])).toBe(GO_NOTE)
    const v = parseVerifierKey(GO_VKEY)!
    expect(v.keyHash).toBe(0xc74f20a3)
    expect(openNote(GO_NOTE, [v])).toEqual({ _tag: "Opened", text: GO_TEXT, verifiedBy: ["PeterNeumann"], unknown: [] })
    expectRefused(openNote(GO_NOTE.replace("cryptography", "cryptographY"), [v]), "badSignature")
  })

  it("the key hash is the first 4 bytes of SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key)", () => {
    const raw = rawPublicKey(keys.publicKey)
    const want = createHash("sha256").update(Buffer.concat([Buffer.from(`${NAME}\n`), Buffer.of(1), raw])).digest().readUInt32BE(0)
    expect(keyHash(NAME, raw)).toBe(want)
    expect(signer.keyHash).toBe(want)
    expect(verifier.keyHash).toBe(want)
  })

  it("a verifier key that is mangled is not one", () => {
    for (const bad of [GO_VKEY.replace("c74f20a3", "c74f20a4"), GO_VKEY.replace("+AR", "+Ah"), GO_VKEY.slice(0, -1), `Peter Neumann${GO_VKEY.slice(12)}`, GO_VKEY.replace("PeterNeumann", "")]) {
      expect(parseVerifierKey(bad), bad).toBeUndefined()
    }
  })
})

describe("checkpoints", () => {
  it("the body is origin, size, base64 root, one a line", () => {
    const body = renderCheckpoint(cp)
    expect(body).toBe(`tollgate/proj_1\n5\n${Buffer.from(cp.rootHash).toString("base64")}\n`)
    expect(signed.startsWith(`${body}\n\u2014 ${NAME} `)).toBe(true)
    expect(signed.endsWith("\n")).toBe(true)
    expect(signed.split("\n").length).toBe(6)
  })

  it("property: a checkpoint signed is opened as itself; its body parses as itself", () => {
    const line = fc.string({ minLength: 1, maxLength: 20, unit: "grapheme" }).filter((s) => !/[\u0000-\u001F\u007F]/.test(s))
    fc.assert(
      fc.property(
        line,
        fc.nat({ max: Number.MAX_SAFE_INTEGER }),
        fc.uint8Array({ minLength: 32, maxLength: 32 }),
        fc.array(line, { maxLength: 3 }),
        (project, treeSize, rootHash, extensions) => {
          const c: Checkpoint = { origin: originOf(project), treeSize, rootHash, extensions }
          const opened = openCheckpoint(signCheckpoint(c, [signer]), [verifier], originOf(project))
          expect(opened).toEqual({ _tag: "Opened", checkpoint: c, verifiedBy: [NAME] })
          expect(parseCheckpoint(renderCheckpoint(c))).toEqual(c)
        }
      ),
      { numRuns: 200 }
    )
  })

  it("a wrong key is refused: another key under the same name, a key that does not match its hash", () => {
    expectRefused(openCheckpoint(signed, [noteVerifier(NAME, other.publicKey)], ORIGIN), "unverified")
    expectRefused(openCheckpoint(signed, [], ORIGIN), "unverified")
    expectRefused(openCheckpoint(signed, [noteVerifier("rk_other", keys.publicKey)], ORIGIN), "unverified")
    // Name and key hash match (so the signature is its), but the key checking it is another.
    const impostor: NoteVerifier = { ...verifier, check: noteVerifier(NAME, other.publicKey).check }
    expectRefused(openCheckpoint(signed, [impostor], ORIGIN), "badSignature")
    // Signed by the other key under the receipt key's name: its key hash is not the receipt key's.
    expectRefused(openCheckpoint(signCheckpoint(cp, [noteSignerOfKey(NAME, other.privateKey)]), [verifier], ORIGIN), "unverified")
  })

  it("an edited line is refused: the size, the root, the origin, a line added, the signature", () => {
    const root = Buffer.from(cp.rootHash).toString("base64")
    const otherRoot = Buffer.from(treeHead(leaves, 4)).toString("base64")
    const edits: Array<[string, string]> = [
      ["size", signed.replace("\n5\n", "\n6\n")],
      ["root", signed.replace(root, otherRoot)],
      ["origin", signed.replace("tollgate/proj_1", "tollgate/proj_2")],
      ["extension added", signed.replace(`${root}\n`, `${root}\ntime 1764323000\n`)]
    ]
    for (const [what, note] of edits) {
      expect(note, what).not.toBe(signed)
      expectRefused(openCheckpoint(note, [verifier], what === "origin" ? originOf("proj_2") : ORIGIN), "badSignature")
    }
    const sig = signed.slice(signed.lastIndexOf(" ") + 1, -1)
    const flipped = Buffer.from(sig, "base64")
    flipped[10] = flipped[10]! ^ 1
    expectRefused(openCheckpoint(signed.replace(sig, flipped.toString("base64")), [verifier], ORIGIN), "badSignature")
  })

  it("property: any one character of the body changed is refused", () => {
    const body = renderCheckpoint(cp)
    fc.assert(
      fc.property(fc.nat({ max: body.length - 1 }), fc.constantFrom("0", "1", "A", "/", "+", "=", "\n", " ", "x", "\u2014", ""), (at, c) => {
        const edited = body.slice(0, at) + c + body.slice(at + 1)
        fc.pre(edited !== body)
        expect(openCheckpoint(signed.replace(body, edited), [verifier], ORIGIN)._tag).toBe("Refused")
      }),
      { numRuns: 300 }
    )
  })

  it("the format is exact: trailing newlines, line endings, the dash, numbers and base64 spelled one way", () => {
    const body = renderCheckpoint(cp)
    const sigLine = signed.slice(body.length + 1)
    const root = Buffer.from(cp.rootHash).toString("base64")
    const malformed: Array<[string, string]> = [
      ["no final newline", signed.slice(0, -1)],
      ["a trailing blank line", `${signed}\n`],
      ["no signature", `${body}\n`],
      ["no blank line", `${body}${sigLine}`],
      ["CRLF", signed.replaceAll("\n", "\r\n")],
      ["a hyphen for the dash", signed.replace("\u2014", "-")],
      ["two spaces", signed.replace(`\u2014 ${NAME} `, `\u2014 ${NAME}  `)],
      ["a tab", signed.replace("\n5\n", "\n5\t\n")],
      ["unpadded signature", signed.replace(/=\n$/, "\n")],
      ["a line that is no signature", `${signed}not a signature\n`],
      [`more than ${MAX_SIGNATURES} signatures`, `${body}\n${sigLine.repeat(MAX_SIGNATURES + 1)}`]
    ]
    for (const [what, note] of malformed) expect(openCheckpoint(note, [verifier], ORIGIN), what).toMatchObject({ _tag: "Refused", reason: "malformed" })

    // Bodies that are no checkpoint, correctly signed: refused for what they say.
    const notCheckpoints: Array<[string, string]> = [
      ["leading zero", body.replace("\n5\n", "\n05\n")],
      ["negative", body.replace("\n5\n", "\n-5\n")],
      ["exponent", body.replace("\n5\n", "\n5e0\n")],
      ["beyond 2^53 − 1", body.replace("\n5\n", "\n9007199254740992\n")],
      ["short root", body.replace(root, Buffer.alloc(31).toString("base64"))],
      ["root not in its one spelling", body.replace(root, looseSpelling(root))],
      ["root unpadded", body.replace(root, root.slice(0, -1))],
      ["no root", `${ORIGIN}\n5\n`]
    ]
    for (const [what, text] of notCheckpoints) {
      expect(text, what).not.toBe(body)
      const note = signNote(text, [signer])
      const result = openCheckpoint(note, [verifier], ORIGIN)
      expect(result._tag, what).toBe("Refused")
      expect((result as { reason: string }).reason, what).toBe("malformed")
    }
    // An empty origin is a blank line: no note can carry it, and no checkpoint has it.
    expect(parseCheckpoint(body.replace(ORIGIN, ""))).toHaveProperty("malformed")
    // The loose spelling decodes to the very root (Buffer forgives its padding bits): only one spelling is the checkpoint's.
    expect(Buffer.from(looseSpelling(root), "base64").equals(Buffer.from(cp.rootHash))).toBe(true)
    expect(parseCheckpoint(body.replace(root, looseSpelling(root)))).toHaveProperty("malformed")
  })

  it("another log's checkpoint, signed by the right key, is refused as such", () => {
    expectRefused(openCheckpoint(signed, [verifier], originOf("proj_2")), "wrongOrigin")
  })

  it("cosigned: an unknown key's signature is ignored; a known key's first line decides", () => {
    const cosigner = noteSignerOfKey("witness.example/w1", other.privateKey)
    const both = signCheckpoint(cp, [cosigner, signer])
    const opened = openNote(both, [verifier])
    expect(opened._tag).toBe("Opened")
    expect(opened._tag === "Opened" && opened.unknown.map((u) => u.name)).toEqual(["witness.example/w1"])
    expect(openNote(both, [verifier, noteVerifier("witness.example/w1", other.publicKey)])).toMatchObject({ verifiedBy: ["witness.example/w1", NAME] })
    // The same key's line twice: the first decides, a later bad copy is skipped (as Go's note.Open).
    const sigLine = signed.slice(renderCheckpoint(cp).length + 1)
    const blob = Buffer.from(sigLine.slice(sigLine.lastIndexOf(" ") + 1, -1), "base64")
    blob[20] = blob[20]! ^ 1
    const bad = `${sigLine.slice(0, sigLine.lastIndexOf(" ") + 1)}${blob.toString("base64")}\n`
    expect(openNote(`${signed}${bad}`, [verifier])._tag).toBe("Opened")
    expectRefused(openNote(`${renderCheckpoint(cp)}\n${bad}${sigLine}`, [verifier]), "badSignature")
  })

  it("what cannot be written is not: bad origins, sizes, roots, extension lines, key names, note texts", () => {
    expect(() => renderCheckpoint({ ...cp, origin: "" })).toThrow(TypeError)
    expect(() => renderCheckpoint({ ...cp, origin: "a\nb" })).toThrow(TypeError)
    expect(() => renderCheckpoint({ ...cp, treeSize: -1 })).toThrow(TypeError)
    expect(() => renderCheckpoint({ ...cp, treeSize: 1.5 })).toThrow(TypeError)
    expect(() => renderCheckpoint({ ...cp, rootHash: new Uint8Array(31) })).toThrow(TypeError)
    expect(() => renderCheckpoint({ ...cp, extensions: [""] })).toThrow(TypeError)
    for (const name of ["", "a b", "a+b", "a\u00a0b", "a\nb"]) expect(() => noteSignerOfKey(name, keys.privateKey), JSON.stringify(name)).toThrow(TypeError)
    for (const text of ["", "no newline", "a\n\nb\n", "\nb\n", "tab\t\n"]) expect(() => signNote(text, [signer]), JSON.stringify(text)).toThrow(TypeError)
    expect(() => signNote("a\n", [])).toThrow(TypeError)
  })
})
