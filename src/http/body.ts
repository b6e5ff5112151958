/**
 * Reading a JSON request body within a size and a depth limit, straight from node's IncomingMessage.
 * One implementation for the Effect handlers (src/http/app.ts) and the raw fast path (src/http/fast.ts),
 * so both answer 413 / 400 with the same messages.
 *
 * Depth is checked on the raw bytes as they arrive, before JSON.parse: a body nested deeper than the
 * limit never becomes an object, so no recursive walk of it (JSON.stringify upstream, the idempotency
 * fingerprint, the token estimate) can overflow the stack. A body refused before it was read to its end
 * is answered with `Connection: close`, and the connection closed gracefully: its rest read and
 * discarded for a bounded time and size after the answer (`closeIfUnread`, `LINGER`).
 */
import type { IncomingMessage, ServerResponse } from "node:http"
import { Socket } from "node:net"
import { InvalidRequest, PayloadTooLarge } from "../domain/errors.ts"

export type BodyResult =
  | { readonly ok: true; readonly value: unknown }
  | { readonly ok: false; readonly error: PayloadTooLarge | InvalidRequest }

export interface BodyLimits {
  readonly maxBodyBytes: number
  readonly maxJsonDepth: number
}

// Built only when needed: an Effect error captures a stack trace, too costly for every request.
const tooLarge = (maxBytes: number): BodyResult => ({
  ok: false,
  error: new PayloadTooLarge({ message: `The request body exceeds the limit of ${maxBytes} bytes.` })
})
const invalid = (message: string): BodyResult => ({ ok: false, error: new InvalidRequest({ message, param: null }) })
const tooDeep = (maxDepth: number): BodyResult =>
  invalid(`The JSON body nests arrays and objects deeper than ${maxDepth} levels; flatten it.`)

/** The body's declared length (0 when absent), as the 413 check before reading sees it. */
export const declaredLength = (source: IncomingMessage): number => {
  const v = source.headers["content-length"]
  return Number(typeof v === "string" ? v : "0")
}

/** Opening brackets (`[`, `{`) in a chunk, strings not told apart; stops counting past `limit`. */
const openingBrackets = (chunk: Uint8Array, limit: number): number => {
  let n = 0
  for (let i = chunk.indexOf(0x7b); i !== -1 && n <= limit; i = chunk.indexOf(0x7b, i + 1)) n++
  for (let i = chunk.indexOf(0x5b); i !== -1 && n <= limit; i = chunk.indexOf(0x5b, i + 1)) n++
  return n
}

/**
 * The nesting depth of JSON text fed in chunks: brackets outside strings. Bytes of multi-byte UTF-8
 * characters are all ≥ 0x80, so a byte-wise scan never mistakes one for a quote or a bracket.
 * Returns false from `feed` as soon as the depth exceeds `maxDepth`.
 *
 * A text with no more opening brackets than `maxDepth` cannot nest deeper, so until the count passes
 * the limit only the brackets are counted (native `indexOf`, ≈ 10× cheaper than the byte loop on a
 * typical chat body); the chunks seen so far are then scanned byte by byte and every later one too.
 */
export const makeDepthScanner = (maxDepth: number): DepthScanner => new DepthScanner(maxDepth)

// A class: its methods are defined once, where closures would be made again for every request.
class DepthScanner {
  private depth = 0
  private inString = false
  private escaped = false
  private opens = 0
  /** The chunks fed while only brackets were counted; undefined once scanning byte by byte. */
  private counted: Array<Uint8Array> | undefined = []

  constructor(private readonly maxDepth: number) {}

  feed(chunk: Uint8Array): boolean {
    const counted = this.counted
    if (counted === undefined) return this.scan(chunk)
    this.opens += openingBrackets(chunk, this.maxDepth - this.opens)
    counted.push(chunk)
    if (this.opens <= this.maxDepth) return true
    this.counted = undefined
    for (const c of counted) if (!this.scan(c)) return false
    return true
  }

  private scan(chunk: Uint8Array): boolean {
    let { depth, inString, escaped } = this
    const maxDepth = this.maxDepth
    let fits = true
    for (let i = 0; i < chunk.length; i++) {
      const b = chunk[i]!
      if (inString) {
        if (escaped) escaped = false
        else if (b === 0x5c) escaped = true // backslash
        else if (b === 0x22) inString = false // quote
      } else if (b === 0x22) inString = true
      else if (b === 0x5b || b === 0x7b) {
        // [ {
        if (++depth > maxDepth) {
          fits = false
          break
        }
      } else if (b === 0x5d || b === 0x7d) depth-- // ] }
    }
    this.depth = depth
    this.inString = inString
    this.escaped = escaped
    return fits
  }
}

/** Parse a body's text: 400 when empty or not JSON. (Depth is checked on the bytes, before this.) */
export const parseJsonText = (text: string): BodyResult => {
  if (text.length === 0) return invalid("The request body is empty; send a JSON object.")
  try {
    return { ok: true, value: JSON.parse(text) as unknown }
  } catch {
    return invalid("We could not parse the JSON body of your request. Send valid JSON with 'Content-Type: application/json'.")
  }
}

/**
 * How long and how much of a refused body is still read after the early answer, whichever ends
 * first (a lingering close, as nginx's `lingering_time` 30 s / `lingering_timeout` 5 s). Enough for
 * a client on a fast link to finish sending a body several times the default 8 MiB limit (a 40 MB
 * message) and read the answer; still a bound on what one connection costs: an endless body is cut
 * off within 5 s, a fast one after 64 MiB. A request timeout (TOLLGATE_REQUEST_TIMEOUT_MS) that
 * falls due first cuts it off sooner.
 */
export interface Linger {
  readonly ms: number
  readonly bytes: number
}
export const LINGER: Linger = { ms: 5_000, bytes: 64 * 1024 * 1024 }

/**
 * Answering before the request's body was read to its end (401 before reading, 413, a body too deep):
 * say `Connection: close` and close gracefully (`lingerOn`) rather than reading the rest of the body to
 * reuse the connection, or closing it with the body unread. Call before the response head is written.
 */
export const closeIfUnread = (res: ServerResponse, linger: Linger = LINGER): void => {
  if (res.req.complete) return
  res.shouldKeepAlive = false
  const socket = res.socket as Closing | null
  if (socket !== null && !socket.destroyed && socket.destroySoon === destroySoon) lingerOn(res.req, socket, linger)
}

/** net.Socket's `destroySoon` (not in @types/node): end the writable side, destroy once that is flushed. */
type Closing = Socket & { destroySoon: () => void }
const destroySoon = (Socket.prototype as Closing).destroySoon

/**
 * A lingering close. Closing a socket whose received bytes are unread makes the kernel send a reset,
 * and a client still sending its body then loses the answer it was sent (EPIPE, "fetch failed" — and
 * an SDK retries the whole upload). Node ends a `Connection: close` response with
 * `socket.destroySoon()`; on this socket that call only half-closes (the answer, then FIN), while the
 * rest of the body is read and discarded. The socket is closed once the body has ended and the answer
 * is out, or cut off (reset) after `linger.ms` or past `linger.bytes` more. A client that closes or
 * resets its side meanwhile ends it too (node's 'clientError', src/http/errors.ts).
 */
const lingerOn = (req: IncomingMessage, socket: Closing, linger: Linger): void => {
  let answered = false
  let bodyRead = false
  let drained = 0
  const cutOff = () => socket.destroy()
  const timer = setTimeout(cutOff, linger.ms).unref()
  const close = () => {
    socket.destroySoon = destroySoon
    socket.destroySoon()
  }
  socket.destroySoon = () => {
    answered = true
    if (bodyRead) close()
    else socket.end()
  }
  req.on("data", (chunk: Buffer) => {
    drained += chunk.length
    if (drained > linger.bytes) cutOff()
  })
  req.once("end", () => {
    bodyRead = true
    if (answered) close()
  })
  socket.once("close", () => clearTimeout(timer))
}

/**
 * Read and parse a JSON body within the limits, then call `done` once: 413 when the declared or the
 * received length is over the size limit, 400 when nested too deep, empty, unreadable or not JSON.
 * After a refusal the rest of the body is not buffered; the answer closes the connection
 * (`closeIfUnread`, after a bounded drain). Once it has answered, the reader takes its listeners off the request: the
 * request lives as long as its call, and listeners left on it would keep the reader's state — and
 * `done` — alive through every scavenge of the call's upstream wait (docs/decisions/0035). A later
 * 'error' still finds a listener (`ignoreError`), so it never becomes an uncaught exception.
 */
export const readJsonBody = (source: IncomingMessage, limits: BodyLimits, done: (result: BodyResult) => void): void => {
  const { maxBodyBytes, maxJsonDepth } = limits
  if (declaredLength(source) > maxBodyBytes) return done(tooLarge(maxBodyBytes))
  const chunks: Array<Buffer> = []
  const depth = makeDepthScanner(maxJsonDepth)
  let bytes = 0
  let finished = false
  const finish = (result: () => BodyResult) => {
    if (finished) return
    finished = true
    const r = result()
    chunks.length = 0
    source.off("data", onData)
    source.off("end", onEnd)
    source.off("error", onError)
    source.on("error", ignoreError)
    done(r)
  }
  const onData = (chunk: Buffer) => {
    bytes += chunk.length
    if (bytes > maxBodyBytes) finish(() => tooLarge(maxBodyBytes))
    else if (!depth.feed(chunk)) finish(() => tooDeep(maxJsonDepth))
    else chunks.push(chunk)
  }
  const onEnd = () =>
    finish(() => parseJsonText(chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks, bytes).toString("utf8")))
  const onError = () => finish(() => invalid("The request body could not be read."))
  source.on("data", onData)
  source.once("end", onEnd)
  source.once("error", onError)
}

/** What a request's later 'error' meets once its body was answered: the call already has its answer. */
const ignoreError = (): void => {}
