/**
 * Reading a JSON request body within a size limit, straight from node's IncomingMessage. One
 * implementation for the Effect handlers (src/http/app.ts) and the raw fast path (src/http/fast.ts),
 * so both answer 413 / 400 with the same messages.
 */
import type { IncomingMessage } from "node:http"
import { InvalidRequest, PayloadTooLarge } from "../domain/errors.ts"

export type BodyResult =
  | { readonly ok: true; readonly value: unknown }
  | { readonly ok: false; readonly error: PayloadTooLarge | InvalidRequest }

// Built only when needed: an Effect error captures a stack trace, too costly for every request.
const tooLarge = (maxBytes: number): BodyResult => ({
  ok: false,
  error: new PayloadTooLarge({ message: `The request body exceeds the limit of ${maxBytes} bytes.` })
})
const invalid = (message: string): BodyResult => ({ ok: false, error: new InvalidRequest({ message, param: null }) })

/** The body's declared length (0 when absent), as the 413 check before reading sees it. */
export const declaredLength = (source: IncomingMessage): number => {
  const v = source.headers["content-length"]
  return Number(typeof v === "string" ? v : "0")
}

/** Parse a body's text: 400 when empty or not JSON. */
export const parseJsonText = (text: string): BodyResult => {
  if (text.length === 0) return invalid("The request body is empty; send a JSON object.")
  try {
    return { ok: true, value: JSON.parse(text) as unknown }
  } catch {
    return invalid("We could not parse the JSON body of your request. Send valid JSON with 'Content-Type: application/json'.")
  }
}

/**
 * Read and parse a JSON body of at most `maxBytes`, then call `done` once: 413 when the declared or
 * the received length is over the limit, 400 when empty, unreadable or not JSON. Past the limit the
 * rest is drained unbuffered rather than destroyed (as `withMaxBodySize` does), so a chunked upload
 * still receives its 413 instead of a connection reset.
 */
export const readJsonBody = (source: IncomingMessage, maxBytes: number, done: (result: BodyResult) => void): void => {
  if (declaredLength(source) > maxBytes) return done(tooLarge(maxBytes))
  const chunks: Array<Buffer> = []
  let bytes = 0
  let finished = false
  const finish = (result: () => BodyResult) => {
    if (finished) return
    finished = true
    const r = result()
    chunks.length = 0
    done(r)
  }
  source.on("data", (chunk: Buffer) => {
    if (finished) return
    bytes += chunk.length
    if (bytes > maxBytes) finish(() => tooLarge(maxBytes))
    else chunks.push(chunk)
  })
  source.once("end", () =>
    finish(() => parseJsonText(chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks, bytes).toString("utf8")))
  )
  source.once("error", () => finish(() => invalid("The request body could not be read.")))
}
