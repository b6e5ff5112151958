/**
 * Token counting with a real BPE tokenizer (o200k_base via gpt-tokenizer), used to estimate the input
 * of a reservation and to count delivered output when an upstream reports no usage.
 * Chat overhead follows OpenAI's published accounting: 3 tokens per message plus 3 to prime the reply.
 *
 * Bounded cost, whatever the text (issue 19, finding 1). BPE merges within one pre-tokenized piece,
 * and gpt-tokenizer's merge is super-linear in the piece's length: a run of text without spaces (a
 * base64 blob, a CJK document, 20 KB of "!") is one piece, and 1 MB of it took minutes on the event
 * loop. Three bounds:
 * - a text is cut before BPE wherever a run of non-whitespace (or of whitespace) reaches
 *   MAX_RUN_BYTES of UTF-8, and each segment is counted on its own, so no piece is longer than
 *   ≈ 2 × MAX_RUN_BYTES and counting is linear in the text. Ordinary text (words shorter than the
 *   bound) is cut nowhere and counted exactly as before; each cut adds one token to the count, since
 *   BPE may merge across a cut differently than within the whole text (rarely, into fewer tokens),
 *   so a cut text's count errs high (test/services/Tokenizer.test.ts: never below the whole text's
 *   count), the safe side for a reservation;
 * - one count spends at most BUDGET_MS in the tokenizer; past it the rest of the text counts as its
 *   UTF-8 length, an upper bound (no token is shorter than a byte);
 * - a request's input is counted in slices of at most SLICE_MS of tokenizer time, with a turn of
 *   the event loop between slices (`countChatInput`), so no request holds the loop for more than a
 *   slice.
 */
import { Effect } from "effect"
import { countTokens } from "gpt-tokenizer"

/** The longest run (UTF-8 bytes, estimated) handed to BPE in one piece. */
export const MAX_RUN_BYTES = 192
/** Characters at most in one call of the tokenizer (a segment ends at the next start of a run after this). */
export const SLICE_CHARS = 16_384
/** Tokenizer time between two yields to the event loop (`countChatInput`). */
export const SLICE_MS = 4
/**
 * Tokenizer time one count may spend. BPE of text unlike any the tokenizer has seen (no piece cached)
 * costs ≈ 2–4 µs a character even cut into short runs, so 8 MiB of it would take half a minute; past
 * this budget the rest of the text is estimated by its UTF-8 length, an upper bound (no token is
 * shorter than one byte). Ordinary prompts never reach it (≈ 0.07 µs a character: 1 MB ≈ 70 ms).
 */
export const BUDGET_MS = 250

/** Tokenizer time one count spent, in all and since its last yield; shared by the texts of one request. */
export interface TokenizerBudget {
  spentMs: number
  sinceYieldMs: number
}

/** ECMAScript `\s`: the separators o200k's pre-tokenizer splits pieces on. */
const isWhitespace = (c: number): boolean =>
  c === 32 || (c >= 9 && c <= 13) ||
  (c >= 0x80 && (c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000 || c === 0xfeff))

/** The result of a count, and whether it is exact BPE (only those are cached). */
interface Counted {
  readonly tokens: number
  readonly exact: boolean
}

/**
 * Count `text` segment by segment within `budget`, yielding whenever SLICE_MS of tokenizer time passed
 * since the last yield: a sync caller runs it to the end, `countChatInput` between event-loop turns.
 */
function* countSegments(text: string, budget: TokenizerBudget): Generator<void, Counted> {
  let total = 0
  let start = 0
  let run = 0
  let runIsSpace = false
  const segment = (end: number): boolean => {
    if (budget.spentMs >= BUDGET_MS) return false
    const t0 = performance.now()
    // A cut can change how BPE merges across it, rarely for fewer tokens than the whole (fast-check
    // found 44 for 45): one more token per cut keeps the estimate on the high side.
    total += countTokens(text.slice(start, end)) + (end < text.length ? 1 : 0)
    const ms = performance.now() - t0
    budget.spentMs += ms
    budget.sinceYieldMs += ms
    start = end
    return true
  }
  const overBudget = (): Counted => ({ tokens: total + Buffer.byteLength(text.slice(start)), exact: false })
  // Short enough that no run can exceed the bound: the tokenizer's own count.
  if (text.length * 3 <= MAX_RUN_BYTES) return segment(text.length) ? { tokens: total, exact: true } : overBudget()
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    const space = isWhitespace(c)
    const turn = space !== runIsSpace
    if (turn) {
      runIsSpace = space
      run = 0
    }
    run += c < 0x80 ? 1 : c < 0x800 ? 2 : 3
    // Never cut between the halves of a surrogate pair.
    if (c >= 0xdc00 && c <= 0xdfff) continue
    // A long segment ends at the next start of a run (never inside a word); a long run is cut.
    if (run > MAX_RUN_BYTES || (turn && i - start >= SLICE_CHARS)) {
      if (!segment(i)) return overBudget()
      run = c < 0x80 ? 1 : c < 0x800 ? 2 : 3
      if (budget.sinceYieldMs >= SLICE_MS) {
        budget.sinceYieldMs = 0
        yield
      }
    }
  }
  return segment(text.length) ? { tokens: total, exact: true } : overBudget()
}

/** The bounded count of one text, synchronously (at most BUDGET_MS of tokenizer time). */
export const countBounded = (text: string): number => countWithin(text, { spentMs: 0, sinceYieldMs: 0 }).tokens

const countWithin = (text: string, budget: TokenizerBudget): Counted => {
  const steps = countSegments(text, budget)
  for (;;) {
    const step = steps.next()
    if (step.done === true) return step.value
  }
}

/**
 * Recent counts, in two generations. Prompts repeat — the same system prompt on every call of an
 * application, a conversation's history resent with each turn — and BPE costs ≈ 0.1 µs a character,
 * so a long system prompt would be re-counted at a cost of hundreds of µs per call. A count is a pure
 * function of the text, so a hit is exact; only exact counts are put (a count cut short by the budget
 * is not). Each generation holds at most half the entries (one at the least) and half the
 * characters (a longer text is counted, never kept); when the recent one is full it becomes the
 * older one and the older one is dropped, and a hit in the older one is put in the recent one: a
 * text used within the last generation stays. No Map entry is ever deleted: an exact LRU (delete and
 * re-set on each hit, evict from the front) left the Map's front full of deleted entries that every
 * eviction's `keys()` walked again, ≈ 19 µs a call under load with unique prompts (decisions/0015).
 */
export const makeCountCache = (maxEntries = 4096, maxChars = 4_000_000) => {
  const entriesEach = Math.max(1, Math.floor(maxEntries / 2))
  const charsEach = maxChars / 2
  let recent = new Map<string, number>()
  let older = new Map<string, number>()
  let chars = 0
  const put = (text: string, n: number): void => {
    if (text.length > charsEach || recent.has(text)) return
    if (recent.size >= entriesEach || chars + text.length > charsEach) {
      older = recent
      recent = new Map()
      chars = 0
    }
    recent.set(text, n)
    chars += text.length
  }
  const get = (text: string): number | undefined => {
    const hit = recent.get(text)
    if (hit !== undefined) return hit
    const old = older.get(text)
    if (old !== undefined) put(text, old)
    return old
  }
  return { get, put }
}

const countCache = makeCountCache()

/** Tokens of one text: cached when exact, at most BUDGET_MS of tokenizer time otherwise. */
export const countText = (text: string): number => {
  if (text.length === 0) return 0
  const hit = countCache.get(text)
  if (hit !== undefined) return hit
  const counted = countWithin(text, { spentMs: 0, sinceYieldMs: 0 })
  if (counted.exact) countCache.put(text, counted.tokens)
  return counted.tokens
}

const contentText = (content: unknown): string => {
  if (typeof content === "string") return content
  if (Array.isArray(content)) {
    let s = ""
    for (const part of content) {
      if (part !== null && typeof part === "object" && typeof (part as { text?: unknown }).text === "string") {
        s += (part as { text: string }).text
      }
    }
    return s
  }
  return ""
}

export interface ChatMessageLike {
  readonly role?: unknown
  readonly content?: unknown
  readonly name?: unknown
  readonly tool_calls?: unknown
}

/** The texts a chat request's input estimate counts, and the fixed overhead around them. */
const chatTexts = (messages: ReadonlyArray<ChatMessageLike>, extra: unknown): { readonly overhead: number; readonly texts: Array<string> } => {
  let overhead = 3
  const texts: Array<string> = []
  for (const m of messages) {
    overhead += 3
    if (typeof m.role === "string") texts.push(m.role)
    texts.push(contentText(m.content))
    if (typeof m.name === "string") {
      overhead += 1
      texts.push(m.name)
    }
    if (m.tool_calls !== undefined) texts.push(JSON.stringify(m.tool_calls) ?? "")
  }
  if (extra !== undefined) texts.push(JSON.stringify(extra) ?? "")
  return { overhead, texts }
}

const sumTexts = (overhead: number, texts: ReadonlyArray<string>): number => {
  let total = overhead
  for (const t of texts) total += countText(t)
  return total
}

/** Estimated prompt tokens of a chat request (messages plus any tool definitions), synchronously. */
export const countChat = (messages: ReadonlyArray<ChatMessageLike>, extra?: unknown): number => {
  const { overhead, texts } = chatTexts(messages, extra)
  return sumTexts(overhead, texts)
}

/**
 * Estimated prompt tokens of a chat request, never holding the event loop for more than about one
 * slice: a request whose texts fit one slice is counted at once (the common case, no yield), a larger
 * one slice by slice with a turn of the event loop between slices, within one BUDGET_MS for the whole
 * request. Interruption stops the count.
 */
export const countChatInput = (messages: ReadonlyArray<ChatMessageLike>, extra?: unknown): Effect.Effect<number> => {
  const { overhead, texts } = chatTexts(messages, extra)
  return fitsOneSlice(texts) ? Effect.succeed(sumTexts(overhead, texts)) : countSliced(overhead, texts)
}

/**
 * `countChatInput`'s common case with no effect: the count of a request whose texts fit one slice,
 * or undefined when it must be counted slice by slice (then use `countChatInput`).
 */
export const countChatInputNow = (messages: ReadonlyArray<ChatMessageLike>, extra?: unknown): number | undefined => {
  const { overhead, texts } = chatTexts(messages, extra)
  return fitsOneSlice(texts) ? sumTexts(overhead, texts) : undefined
}

const fitsOneSlice = (texts: ReadonlyArray<string>): boolean => {
  let size = 0
  for (const t of texts) size += t.length
  return size <= SLICE_CHARS
}

/** A request larger than one slice, counted slice by slice with a turn of the event loop between. */
const countSliced = (overhead: number, texts: ReadonlyArray<string>): Effect.Effect<number> =>
  Effect.async<number>((resume) => {
    const budget: TokenizerBudget = { spentMs: 0, sinceYieldMs: 0 }
    let total = overhead
    let index = 0
    let current: { readonly text: string; readonly steps: Generator<void, Counted> } | undefined
    let timer: NodeJS.Immediate | undefined
    const step = (): void => {
      timer = undefined
      for (;;) {
        if (current !== undefined) {
          const next = current.steps.next()
          if (next.done !== true) break // a slice was counted: let the event loop turn
          total += next.value.tokens
          if (next.value.exact) countCache.put(current.text, next.value.tokens)
          current = undefined
        }
        if (index >= texts.length) return resume(Effect.succeed(total))
        // Many short texts (20,000 messages) add up to a slice too.
        if (budget.sinceYieldMs >= SLICE_MS) {
          budget.sinceYieldMs = 0
          break
        }
        const text = texts[index++]!
        const hit = text.length === 0 ? 0 : countCache.get(text)
        if (hit !== undefined) total += hit
        else current = { text, steps: countSegments(text, budget) }
      }
      timer = setImmediate(step)
    }
    step()
    return Effect.sync(() => {
      if (timer !== undefined) clearImmediate(timer)
    })
  })

