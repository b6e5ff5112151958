/**
 * Fault injection: the behaviours that make the mock a bad upstream (a slow answer, an error status,
 * a reset before any answer or in the middle of a stream, slow chunks). The provider handlers
 * (openai.ts, anthropic.ts) build the events; these decide when and whether they are written.
 */
import type { ServerResponse } from "node:http"
import type { MockBehavior } from "./types.ts"
import { gone, sendJson, sleep } from "./wire.ts"

/** Responses the mock cut on purpose (a reset behaviour): not a client that left. */
const resets = new WeakSet<ServerResponse>()

const reset = (res: ServerResponse): void => {
  resets.add(res)
  res.socket?.uncork() // what was written goes out before the cut (node corks a response's first write until the next tick)
  res.socket?.destroy()
  res.destroy()
}

/** Did the client leave this response before its end (and not because the mock reset it)? */
export const leftByClient = (res: ServerResponse): boolean => !res.writableFinished && !resets.has(res)

/** Applies delay / reset / error behaviour. Returns true when the request has been fully handled. */
export const preamble = async (
  res: ServerResponse,
  behavior: MockBehavior,
  requestId: string,
  errorShape: (status: number, message: string) => unknown
): Promise<boolean> => {
  if (behavior.delayMs !== undefined && behavior.delayMs > 0) await sleep(behavior.delayMs)
  if (gone(res)) return true
  if (behavior.resetBeforeResponse === true) {
    reset(res)
    return true
  }
  const status = behavior.status ?? 200
  if (status >= 400) {
    sendJson(res, status, errorShape(status, behavior.reply ?? `Mock upstream error (status ${status})`), requestId)
    return true
  }
  return false
}

/**
 * Writes an SSE response: the head events, the content events (chunkDelayMs before each), then the
 * tail events at once in the response's end (as an upstream sends its finish, usage and end
 * together); resetAfterChunks cuts it after that many content events. Stops quietly if the client
 * went away.
 */
export const writeStream = async (
  res: ServerResponse,
  behavior: MockBehavior,
  requestId: string,
  head: ReadonlyArray<string>,
  content: ReadonlyArray<string>,
  tail: ReadonlyArray<string>
): Promise<void> => {
  // The head goes out with the first events (one write, no flushHeaders of its own).
  res.writeHead(behavior.status ?? 200, { "content-type": "text/event-stream", "cache-control": "no-cache", "x-request-id": requestId })
  const delay = behavior.chunkDelayMs ?? 0
  const resetAfter = behavior.resetAfterChunks
  res.write(head.join(""))
  let written = 0
  for (const e of content) {
    if (resetAfter !== undefined && written >= resetAfter) return reset(res)
    if (delay > 0) await sleep(delay)
    if (gone(res)) return
    res.write(e)
    written++
  }
  if (resetAfter !== undefined && written >= resetAfter) return reset(res)
  if (!gone(res)) res.end(tail.join(""))
}
