/** What the mock upstream is told to do, and what it records (test/support/mockUpstream.ts). */

export interface MockBehavior {
  /** Wait before sending response headers (default 0). */
  delayMs?: number
  /** Default 200; any >= 400 returns a provider-shaped error body. */
  status?: number
  /** Assistant text (or the error message when status >= 400). Default: deterministic text (~30 tokens) derived from the last user message. */
  reply?: string
  /** Streaming: delay before each event after the first (default 0). */
  chunkDelayMs?: number
  /** Streaming: how many content events the reply is cut into (default 5). */
  chunks?: number
  /** Non-stream: omit `usage`; stream: never send usage even if include_usage was requested. */
  omitUsage?: boolean
  /** Stream: destroy the socket abruptly after N content chunks were written (no [DONE]). Ignored for non-streaming requests. */
  resetAfterChunks?: number
  /** Destroy the socket without any response (after `delayMs`). */
  resetBeforeResponse?: boolean
  /** Override reported usage. */
  usage?: {
    prompt_tokens?: number
    completion_tokens?: number
    cached_tokens?: number
    reasoning_tokens?: number
  }
}

export interface RecordedRequest {
  method: string
  path: string
  headers: Record<string, string | string[] | undefined>
  body: unknown
}

export interface MockUpstream {
  /** Base URL ending in /v1, e.g. "http://127.0.0.1:PORT/v1". */
  url: string
  port: number
  /** Number of completion requests received (chat + messages). */
  calls: number
  /** Responses the client left before their end (a hang-up; the mock's own resets do not count). */
  abandoned: number
  /** TCP connections accepted (a client that keeps its connection alive opens one for many requests). */
  connections: number
  /** Every request, in order (last 1000 only). Empty when started with `record: false`. */
  requests: RecordedRequest[]
  /** Default behaviour for all requests. */
  setBehavior(b: MockBehavior): void
  /** One-shot behaviours consumed FIFO before anything else. */
  pushBehavior(b: MockBehavior): void
  /** Per `model` in the request body; takes precedence over the default (the one-shot queue still comes first). */
  behaviorsByModel: Map<string, MockBehavior>
  /** Clears calls, abandoned, connections, requests, the one-shot queue, behaviorsByModel and the default behaviour. */
  reset(): void
  close(): Promise<void>
}

export interface StartMockUpstreamOptions {
  /** 0 (default) picks a free port. */
  port?: number
  /** Default "127.0.0.1". */
  host?: string
  /** Initial default behaviour. */
  behavior?: MockBehavior
  /** Store requests in `requests` (default true). */
  record?: boolean
}

/** One completion request, parsed and checked, as a provider handler gets it. */
export interface CompletionRequest {
  readonly body: Record<string, unknown>
  readonly messages: ReadonlyArray<unknown>
  readonly model: string
  readonly behavior: MockBehavior
  readonly requestId: string
}
