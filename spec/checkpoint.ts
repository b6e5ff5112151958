/**
 * Signed checkpoints of a project's Merkle log (DESIGN §11, issue 43), in the text formats of
 * transparency logs, so tools made for them (Go's sumdb/note, transparency-dev, sigsum) read them:
 *
 * A checkpoint body (C2SP tlog-checkpoint): one item a line, each line ending in a newline,
 *
 *   tollgate/<project id>          the origin: whose log this is
 *   <tree size>                    decimal, no leading zeros
 *   <root hash>                    standard base64 (RFC 4648 §4, padded) of the 32-byte tree head, spec/merkle.ts
 *   [<extension line>…]            optional, non-empty, opaque here
 *
 * A signed note (C2SP signed-note) is that text, a blank line, and one or more signature lines
 *
 *   — <key name> <base64( 4-byte key hash ‖ 64-byte Ed25519 signature of the text )>
 *
 * (an em dash U+2014 and a space first). The text signed includes its final newline, not the blank
 * line. The key hash is the first 4 bytes of SHA-256(key name ‖ 0x0A ‖ 0x01 ‖ 32-byte public key),
 * 0x01 naming Ed25519. A key name is non-empty UTF-8 with neither spaces nor "+".
 *
 * Opening a note follows the spec and Go's `note.Open`: signatures by keys the reader does not know
 * are ignored; the first signature line of a known key (name and key hash) decides for that key, and
 * one that does not verify refuses the whole note; a note with no verified signature is refused.
 * The receipt key signs (Ed25519, whose implementation the caller passes, spec/ed25519.ts).
 */
import type { KeyObject } from "node:crypto"
import { type Ed25519, nodeEd25519, type RawCheck, type Sign } from "./ed25519.ts"
import { HASH_BYTES, sha256 } from "./merkle.ts"
import { ed25519CheckOfRaw, fromBase64Any, keyObjects, toBase64, utf8 } from "./platform.ts"

/** The signature type byte of Ed25519 in C2SP signed-note. */
export const ED25519_TYPE = 0x01
/** Go's `note.Open` refuses more signature lines than this; so does this reader. */
export const MAX_SIGNATURES = 100
const SIGNATURE_DASH = "\u2014 "

export const originOf = (projectId: string): string => `tollgate/${projectId}`

export interface Checkpoint {
  readonly origin: string
  readonly treeSize: number
  /** The tree head of the first `treeSize` leaves, 32 bytes. */
  readonly rootHash: Uint8Array
  readonly extensions: ReadonlyArray<string>
}

// ---------------------------------------------------------------------------------------------
// Text rules

const CONTROL = /[\u0000-\u0009\u000B-\u001F\u007F]/
const LONE_SURROGATE = /\p{Cs}/u
/** Any Unicode space, or "+". */
const NOT_IN_NAME = /[\s+]/u

/** Well-formed text (it has a UTF-8 form) with no ASCII control character but newline. */
const isCleanText = (s: string): boolean => !CONTROL.test(s) && !LONE_SURROGATE.test(s)

export const isKeyName = (name: string): boolean => name.length > 0 && isCleanText(name) && !NOT_IN_NAME.test(name) && !name.includes("\n")

/** Standard padded base64, strictly: only the one spelling of the bytes (a plain decoder forgives). */
const fromBase64 = (s: string): Uint8Array | undefined => {
  if (s.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(s)) return undefined
  const bytes = fromBase64Any(s)
  return toBase64(bytes) === s ? bytes : undefined
}

const uint32At = (b: Uint8Array, at: number): number => ((b[at]! << 24) | (b[at + 1]! << 16) | (b[at + 2]! << 8) | b[at + 3]!) >>> 0

// ---------------------------------------------------------------------------------------------
// Checkpoint body

const isLine = (s: string): boolean => s.length > 0 && !s.includes("\n") && isCleanText(s)

/** The checkpoint's text, what is signed. Throws TypeError on a checkpoint it cannot write. */
export const renderCheckpoint = (cp: Checkpoint): string => {
  if (!isLine(cp.origin)) throw new TypeError(`not an origin: ${JSON.stringify(cp.origin)}`)
  if (!Number.isSafeInteger(cp.treeSize) || cp.treeSize < 0) throw new TypeError(`not a tree size: ${cp.treeSize}`)
  if (!(cp.rootHash instanceof Uint8Array) || cp.rootHash.length !== HASH_BYTES) throw new TypeError("a root hash is 32 bytes")
  for (const e of cp.extensions) if (!isLine(e)) throw new TypeError(`not an extension line: ${JSON.stringify(e)}`)
  return [cp.origin, String(cp.treeSize), toBase64(cp.rootHash), ...cp.extensions].map((l) => `${l}\n`).join("")
}

/** The checkpoint a text spells, or why it is not one. */
export const parseCheckpoint = (text: string): Checkpoint | { readonly malformed: string } => {
  if (!text.endsWith("\n")) return { malformed: "the checkpoint does not end in a newline" }
  if (!isCleanText(text)) return { malformed: "the checkpoint holds a control character or is not UTF-8" }
  const lines = text.slice(0, -1).split("\n")
  if (lines.length < 3) return { malformed: "a checkpoint has an origin, a tree size and a root hash" }
  const [origin, size, root, ...extensions] = lines as [string, string, string, ...Array<string>]
  if (origin.length === 0) return { malformed: "empty origin" }
  if (!/^(0|[1-9][0-9]*)$/.test(size)) return { malformed: `tree size ${JSON.stringify(size)} is not a decimal number` }
  const treeSize = Number(size)
  if (!Number.isSafeInteger(treeSize)) return { malformed: `tree size ${size} is beyond 2^53 − 1` }
  const rootHash = fromBase64(root)
  if (rootHash === undefined || rootHash.length !== HASH_BYTES) return { malformed: "the root hash is not the base64 of 32 bytes" }
  if (extensions.some((e) => e.length === 0)) return { malformed: "an empty line in the checkpoint" }
  return { origin, treeSize, rootHash, extensions }
}

// ---------------------------------------------------------------------------------------------
// Keys

/** The 32-byte Ed25519 public key of a key object (public, or private: its public half). */
export const rawPublicKey = (key: KeyObject): Uint8Array => {
  const pub = key.type === "private" ? keyObjects.createPublicKey(key) : key
  if (pub.asymmetricKeyType !== "ed25519") throw new TypeError("not an Ed25519 key")
  const spki = pub.export({ type: "spki", format: "der" })
  return new Uint8Array(spki.subarray(spki.length - 32))
}

const SPKI_ED25519_PREFIX = Uint8Array.of(0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00)
/** The key object of a 32-byte Ed25519 public key (Node only). */
export const publicKeyOfRaw = (raw: Uint8Array): KeyObject => {
  const der = new Uint8Array(SPKI_ED25519_PREFIX.length + raw.length)
  der.set(SPKI_ED25519_PREFIX)
  der.set(raw, SPKI_ED25519_PREFIX.length)
  return keyObjects.createPublicKey({ key: der as Buffer, format: "der", type: "spki" })
}

/** C2SP signed-note's key hash of an Ed25519 key: the first 4 bytes of SHA-256(name ‖ 0x0A ‖ 0x01 ‖ key), as a uint32. */
export const keyHash = (name: string, publicKey: Uint8Array): number => {
  const h = sha256(utf8(name), Uint8Array.of(0x0a, ED25519_TYPE), publicKey)
  return uint32At(h, 0)
}

export interface NoteSigner {
  readonly name: string
  readonly keyHash: number
  readonly sign: Sign
}

export interface NoteVerifier {
  readonly name: string
  readonly keyHash: number
  readonly check: RawCheck
}

const checkName = (name: string): void => {
  if (!isKeyName(name)) throw new TypeError(`not a key name: ${JSON.stringify(name)}`)
}

/** A signer under `name` for the key pair whose public half is `publicKey` and whose private half `sign` uses. */
export const noteSigner = (name: string, publicKey: Uint8Array | KeyObject, sign: Sign): NoteSigner => {
  checkName(name)
  return { name, keyHash: keyHash(name, publicKey instanceof Uint8Array ? publicKey : rawPublicKey(publicKey)), sign }
}

/** A signer under `name` of an Ed25519 private key, with the implementation given (node:crypto's by default). */
export const noteSignerOfKey = (name: string, privateKey: KeyObject, ed: Ed25519 = nodeEd25519): NoteSigner =>
  noteSigner(name, privateKey, ed.signerFor(privateKey))

/**
 * A verifier under `name` of an Ed25519 public key: raw 32 bytes (checked by this build's own
 * implementation, ./platform.ts, unless `ed` is given) or a key object (Node).
 */
export const noteVerifier = (name: string, publicKey: Uint8Array | KeyObject, ed?: Ed25519): NoteVerifier => {
  checkName(name)
  if (publicKey instanceof Uint8Array && ed === undefined) {
    const check = ed25519CheckOfRaw(publicKey)
    if (check === undefined) throw new TypeError("not an Ed25519 public key")
    return { name, keyHash: keyHash(name, publicKey), check }
  }
  const key = publicKey instanceof Uint8Array ? publicKeyOfRaw(publicKey) : publicKey
  return { name, keyHash: keyHash(name, rawPublicKey(key)), check: (ed ?? nodeEd25519).checkFor(key) as RawCheck }
}

const hex8 = (n: number): string => n.toString(16).padStart(8, "0")

/** The verifier key text tools for signed notes take: `<name>+<hex key hash>+<base64(0x01 ‖ public key)>`. */
export const verifierKey = (name: string, publicKey: Uint8Array | KeyObject): string => {
  checkName(name)
  const raw = publicKey instanceof Uint8Array ? publicKey : rawPublicKey(publicKey)
  return `${name}+${hex8(keyHash(name, raw))}+${toBase64(Uint8Array.of(ED25519_TYPE, ...raw))}`
}

/** The verifier a verifier key text names, or undefined when it is not a well-formed Ed25519 one. */
export const parseVerifierKey = (vkey: string, ed?: Ed25519): NoteVerifier | undefined => {
  const m = /^([^+]+)\+([0-9a-f]{8})\+(.+)$/.exec(vkey)
  if (m === null || !isKeyName(m[1]!)) return undefined
  const key = fromBase64(m[3]!)
  if (key === undefined || key.length !== 33 || key[0] !== ED25519_TYPE) return undefined
  const raw = key.subarray(1)
  if (hex8(keyHash(m[1]!, raw)) !== m[2]) return undefined
  try {
    return noteVerifier(m[1]!, raw, ed)
  } catch {
    return undefined
  }
}

// ---------------------------------------------------------------------------------------------
// Signed notes

/** A note text one can sign: non-empty, ending in a newline, no blank line, no control character. */
const noteTextProblem = (text: string): string | undefined => {
  if (text.length === 0 || !text.endsWith("\n")) return "a note's text ends in a newline"
  if (text.includes("\n\n") || text.startsWith("\n")) return "a note's text has no blank line"
  if (!isCleanText(text)) return "a note's text holds a control character or is not UTF-8"
  return undefined
}

/** The signed note of `text` under each of `signers`. Throws TypeError on a text that is not a note's. */
export const signNote = (text: string, signers: ReadonlyArray<NoteSigner>): string => {
  const problem = noteTextProblem(text)
  if (problem !== undefined) throw new TypeError(problem)
  if (signers.length === 0 || signers.length > MAX_SIGNATURES) throw new TypeError(`a note has 1..${MAX_SIGNATURES} signatures`)
  const message = utf8(text)
  const lines = signers.map((s) => {
    const signature = s.sign(message)
    const blob = new Uint8Array(4 + signature.length)
    blob.set([s.keyHash >>> 24, (s.keyHash >>> 16) & 0xff, (s.keyHash >>> 8) & 0xff, s.keyHash & 0xff])
    blob.set(signature, 4)
    return `${SIGNATURE_DASH}${s.name} ${toBase64(blob)}\n`
  })
  return `${text}\n${lines.join("")}`
}

export type RefusalReason =
  /** Not a signed note, or not a checkpoint inside. */
  | "malformed"
  /** No signature of a key the reader knows. */
  | "unverified"
  /** A signature of a known key that does not verify. */
  | "badSignature"
  /** A checkpoint of another log. */
  | "wrongOrigin"

export interface Refused {
  readonly _tag: "Refused"
  readonly reason: RefusalReason
  readonly detail: string
}

export interface OpenedNote {
  readonly _tag: "Opened"
  readonly text: string
  /** The names of the known keys whose signatures verified, in the note's order. */
  readonly verifiedBy: ReadonlyArray<string>
  /** Signatures of keys the reader does not know, ignored. */
  readonly unknown: ReadonlyArray<{ readonly name: string; readonly keyHash: number }>
}

const refused = (reason: RefusalReason, detail: string): Refused => ({ _tag: "Refused", reason, detail })

/** The text of a signed note, when a key in `verifiers` signed it and none of theirs fails. */
export const openNote = (note: string, verifiers: ReadonlyArray<NoteVerifier>): OpenedNote | Refused => {
  if (!isCleanText(note)) return refused("malformed", "the note holds a control character or is not UTF-8")
  const split = note.lastIndexOf("\n\n")
  if (split < 0) return refused("malformed", "no blank line before the signatures")
  const text = note.slice(0, split + 1)
  const problem = noteTextProblem(text)
  if (problem !== undefined) return refused("malformed", problem)
  const block = note.slice(split + 2)
  if (block.length === 0 || !block.endsWith("\n")) return refused("malformed", "the signatures do not end in a newline")
  const lines = block.slice(0, -1).split("\n")
  if (lines.length > MAX_SIGNATURES) return refused("malformed", `more than ${MAX_SIGNATURES} signatures`)
  const message = utf8(text)
  const seen = new Set<string>()
  const verifiedBy: Array<string> = []
  const unknown: Array<{ name: string; keyHash: number }> = []
  for (const line of lines) {
    if (!line.startsWith(SIGNATURE_DASH)) return refused("malformed", `not a signature line: ${JSON.stringify(line)}`)
    const rest = line.slice(SIGNATURE_DASH.length)
    const space = rest.indexOf(" ")
    const name = rest.slice(0, Math.max(space, 0))
    const blob = space < 0 ? undefined : fromBase64(rest.slice(space + 1))
    if (!isKeyName(name) || blob === undefined || blob.length < 5) return refused("malformed", `not a signature line: ${JSON.stringify(line)}`)
    const hash = uint32At(blob, 0)
    const id = `${name}+${hex8(hash)}`
    if (seen.has(id)) continue
    seen.add(id)
    const verifier = verifiers.find((v) => v.name === name && v.keyHash === hash)
    if (verifier === undefined) {
      unknown.push({ name, keyHash: hash })
      continue
    }
    if (!verifier.check(message, blob.subarray(4))) return refused("badSignature", `the signature of ${id} does not verify`)
    verifiedBy.push(name)
  }
  if (verifiedBy.length === 0) return refused("unverified", `no signature of a known key (signed by ${unknown.map((u) => `${u.name}+${hex8(u.keyHash)}`).join(", ")})`)
  return { _tag: "Opened", text, verifiedBy, unknown }
}

// ---------------------------------------------------------------------------------------------
// Signed checkpoints

/** A checkpoint as a signed note. */
export const signCheckpoint = (cp: Checkpoint, signers: ReadonlyArray<NoteSigner>): string => signNote(renderCheckpoint(cp), signers)

export interface OpenedCheckpoint {
  readonly _tag: "Opened"
  readonly checkpoint: Checkpoint
  readonly verifiedBy: ReadonlyArray<string>
}

/**
 * The checkpoint a signed note holds, when a key in `verifiers` signed it (none of theirs failing)
 * and it is the log of `origin` (`originOf(project id)`).
 */
export const openCheckpoint = (note: string, verifiers: ReadonlyArray<NoteVerifier>, origin: string): OpenedCheckpoint | Refused => {
  const opened = openNote(note, verifiers)
  if (opened._tag === "Refused") return opened
  const cp = parseCheckpoint(opened.text)
  if ("malformed" in cp) return refused("malformed", cp.malformed)
  if (cp.origin !== origin) return refused("wrongOrigin", `the checkpoint is of ${JSON.stringify(cp.origin)}, not ${JSON.stringify(origin)}`)
  return { _tag: "Opened", checkpoint: cp, verifiedBy: opened.verifiedBy }
}
