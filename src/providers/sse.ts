/**
 * A minimal Server-Sent Events reader: bytes in, the `data` of each event out (multi-line data
 * joined with "\n", comments and other fields ignored, lines ended by CRLF, LF or CR), as the
 * WHATWG EventSource spec reads them. An event not closed by a blank line before the end is dropped.
 *
 * One pass, one stream stage: the parser is a plain function over each network chunk (a stream of
 * 20 events through decodeText → splitLines → mapAccum → flatten cost ≈ 4× more CPU).
 */
import type { DataEvents, UpstreamFailure } from "./Provider.ts"

const LINE_END = /\r\n|\r|\n/g

export interface SseParser {
  /** The data of every event completed by this chunk, in order. */
  readonly push: (chunk: Uint8Array) => ReadonlyArray<string>
}

export const makeSseParser = (): SseParser => {
  const decoder = new TextDecoder()
  let buffer = ""
  let data: Array<string> = []
  const push = (chunk: Uint8Array): ReadonlyArray<string> => {
    buffer += decoder.decode(chunk, { stream: true })
    const events: Array<string> = []
    let start = 0
    LINE_END.lastIndex = 0
    for (let m = LINE_END.exec(buffer); m !== null; m = LINE_END.exec(buffer)) {
      // A CR that ends the buffer may be the first half of a CRLF: wait for the next chunk.
      if (m[0] === "\r" && m.index === buffer.length - 1) break
      const line = buffer.slice(start, m.index)
      start = m.index + m[0].length
      if (line === "") {
        if (data.length > 0) {
          events.push(data.join("\n"))
          data = []
        }
      } else if (line.startsWith("data:")) {
        data.push(line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5))
      }
    }
    buffer = buffer.slice(start)
    return events
  }
  return { push }
}

/** After the end (`[DONE]`, or `ended()`), how long the rest of the body (normally just its end) may take before it is cut. */
export const AFTER_END_MS = 1_000
/** Batches read ahead of the reader before the body is paused, and the depth at which it resumes. */
const PAUSE_AT = 16
const RESUME_AT = 4

/** What the feed asks of the body it is fed from. */
export interface SseSource {
  /** Stop reading the body for now (the reader is `PAUSE_AT` batches behind), and read again. */
  readonly pause: () => void
  readonly resume: () => void
  /** Abort the body: the reader stopped before its end, or it stayed open after the end. */
  readonly release: () => void
}

/**
 * The event data of an SSE body pushed in as it arrives, read as DataEvents: a batch per network
 * chunk, up to `[DONE]` (not included), or up to the batch after which `ended()` turns true (a reader
 * that knows the end of its protocol, e.g. Anthropic's `message_stop`, says so there). The body is
 * pushed, not pulled: the transport's dispatch handler calls `data`, `end` and `fail`, so a chunk
 * reaches its reader without a Readable stream and its async iterator in between (what that saves
 * is at the edge of what the bench resolves, docs/decisions/0029).
 *
 * After the end the rest of the body is left to arrive (an upstream closes right after it) and is
 * ignored: aborting an unfinished HTTP body costs the pooled connection; an upstream that keeps it
 * open is cut `AFTER_END_MS` later. A failure of the body before the end is thrown to the reader as
 * `toFailure(error)`; after the end it is none of the reader's business. A reader that stops early
 * (`return`, or `stop` when its scope closes) aborts a body still open before its end.
 */
export interface SseFeed {
  readonly data: (chunk: Uint8Array) => void
  readonly end: () => void
  readonly fail: (error: unknown) => void
  /** The reader is gone (its scope closed): abort the body if it is still open before its end. */
  readonly stop: () => void
  readonly events: DataEvents
}

export const makeSseFeed = (source: SseSource, toFailure: (e: unknown) => UpstreamFailure, ended?: () => boolean): SseFeed => {
  const parser = makeSseParser()
  const queue: Array<ReadonlyArray<string>> = []
  /** open: reading; over: the protocol ended ([DONE], `ended()`) or the reader stopped; failed: the body broke before. */
  let phase: "open" | "over" | "failed" = "open"
  let failure: UpstreamFailure | undefined
  let bodyDone = false
  let paused = false
  let waiter: { readonly resolve: (r: IteratorResult<ReadonlyArray<string>>) => void; readonly reject: (e: unknown) => void } | undefined
  let cutTimer: ReturnType<typeof setTimeout> | undefined

  const DONE: IteratorResult<ReadonlyArray<string>> = { done: true, value: undefined }
  /** Answer a reader that waits: the next batch, the failure, or the end. */
  const wake = () => {
    const w = waiter
    if (w === undefined) return
    if (queue.length > 0) w.resolve({ done: false, value: queue.shift()! })
    else if (phase === "failed") {
      phase = "over"
      w.reject(failure)
    } else if (phase === "over" || bodyDone) w.resolve(DONE)
    else return
    waiter = undefined
  }
  const bodyEnded = () => {
    bodyDone = true
    if (cutTimer !== undefined) clearTimeout(cutTimer)
    cutTimer = undefined
  }
  const release = () => {
    if (bodyDone) return
    bodyEnded()
    source.release()
  }
  /** Nothing more is read: the body is aborted (`now`), or given AFTER_END_MS to end by itself. */
  const over = (now: boolean) => {
    if (phase !== "open") return
    phase = "over"
    if (now) return release()
    if (paused) {
      paused = false
      source.resume()
    }
    if (!bodyDone) {
      cutTimer = setTimeout(release, AFTER_END_MS)
      cutTimer.unref?.()
    }
  }

  const data = (chunk: Uint8Array) => {
    if (phase !== "open") return
    const events = parser.push(chunk)
    const end = events.indexOf("[DONE]")
    const batch = end < 0 ? events : events.slice(0, end)
    if (batch.length > 0) queue.push(batch)
    // The batch before [DONE] is still read; the end follows it.
    if (end >= 0) over(false)
    else if (queue.length >= PAUSE_AT && !paused) {
      paused = true
      source.pause()
    }
    wake()
  }
  const end = () => {
    bodyEnded()
    wake()
  }
  const fail = (error: unknown) => {
    if (bodyDone) return
    bodyEnded()
    if (phase === "open") {
      phase = "failed"
      failure = toFailure(error)
    }
    wake()
  }
  const stop = () => {
    queue.length = 0
    over(true)
    waiter?.resolve(DONE)
    waiter = undefined
  }

  const iterator: AsyncIterator<ReadonlyArray<string>> = {
    next: () => {
      // Asked for more after the batch at which the reader's protocol ended: what follows is not read.
      if (phase === "open" && ended !== undefined && ended()) {
        queue.length = 0
        over(false)
      }
      if (queue.length > 0) {
        const value = queue.shift()!
        if (paused && queue.length <= RESUME_AT) {
          paused = false
          source.resume()
        }
        return Promise.resolve({ done: false, value })
      }
      if (phase === "failed") {
        // Thrown once; a reader that asks again is told the stream is over.
        phase = "over"
        return Promise.reject(failure)
      }
      if (phase === "over" || bodyDone) return Promise.resolve(DONE)
      return new Promise((resolve, reject) => {
        waiter = { resolve, reject }
      })
    },
    return: () => {
      stop()
      return Promise.resolve(DONE)
    }
  }
  return { data, end, fail, stop, events: { [Symbol.asyncIterator]: () => iterator } }
}
