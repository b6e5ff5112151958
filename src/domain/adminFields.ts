/**
 * The bounds of what an admin sends (docs/contract.md §8), one schema per field. The admin payload
 * schemas (src/http/adminApi.ts) decode with them, so the OpenAPI document shows each bound and a
 * refused value is a 400 naming its field before anything is written; the services (Projects,
 * KeyRegistry) check the same schemas for callers that do not come through HTTP (the first start's
 * default project, tests). Issue 38: a `grace_seconds` of 10^13 once put an expiry past the largest
 * Date into the store.
 */
import { Effect, ParseResult, Schema } from "effect"
import { BUDGET_PERIODS, isTimeZone } from "../../spec/periods.ts"
import { InvalidRequest } from "./errors.ts"

/** One year: the longest an old key keeps working after a rotation. */
export const MAX_GRACE_SECONDS = 31_536_000

/**
 * 2^53 − 1, the largest count a JavaScript number holds exactly. The ledger keeps spent + reserved ≤
 * the cap, so its sums stay exact as well, and far inside SQLite's INTEGER and PostgreSQL's BIGINT.
 */
export const MAX_BUDGET_CREDITS = Number.MAX_SAFE_INTEGER

/** One request a microsecond, the rate limiter's clock (spec/rateLimit.ts): a faster rate is not enforced as written. */
export const MAX_REQUESTS_PER_MINUTE = 60_000_000

/** Keeps burst × emission interval (at most 60,000,000 µs, at one request a minute) exact: 6·10^14 < 2^53. */
export const MAX_BURST = 10_000_000

/** Tokens a minute: keeps a token bucket's level (tokens × 60,000 units, src/domain/tokenBucket.ts) exact, 6·10^13 < 2^53. */
export const MAX_TOKENS_PER_MINUTE = 1_000_000_000

/** Calls in flight at once, per project or key. */
export const MAX_CONCURRENT = 100_000

/** A project's name, in characters (code points). */
export const MAX_NAME_LENGTH = 200

const integerFrom = (min: number, max: number, description: string) =>
  Schema.Int.pipe(Schema.between(min, max, { message: (issue) => `Expected an integer from ${min} to ${max}, actual ${String(issue.actual)}` })).annotations({
    description
  })

export const GraceSeconds = integerFrom(0, MAX_GRACE_SECONDS, `How long the old key keeps working, in seconds: 0 to ${MAX_GRACE_SECONDS} (one year); default 86400.`)

export const BudgetCredits = integerFrom(0, MAX_BUDGET_CREDITS, `The project's cap per budget window, in Credits: 0 to ${MAX_BUDGET_CREDITS} (2^53 − 1).`)

export const RequestsPerMinute = integerFrom(1, MAX_REQUESTS_PER_MINUTE, `1 to ${MAX_REQUESTS_PER_MINUTE} (one a microsecond).`)

export const Burst = integerFrom(1, MAX_BURST, `Requests a quiet project may send at once: 1 to ${MAX_BURST}; default a tenth of requests_per_minute.`)

export const TokensPerMinute = integerFrom(1, MAX_TOKENS_PER_MINUTE, `Tokens (prompt and completion) a minute, taken at admission on the estimate and corrected at settlement: 1 to ${MAX_TOKENS_PER_MINUTE}; absent or null: no limit.`)

/** A project's budget period (spec/periods.ts): the window its caps count in. */
export const BudgetPeriod = Schema.Literal(...BUDGET_PERIODS).annotations({
  description: "The window every cap of the project counts in: month (default), week (ISO, Monday to Sunday), day, or total (one window forever); a call belongs to the window of its start."
})

/** A project's time zone: an IANA name the runtime knows. */
export const TimeZone = Schema.String.pipe(
  Schema.filter((s) => isTimeZone(s), { message: (issue) => `Expected an IANA time zone such as Europe/Paris or UTC, actual ${JSON.stringify(issue.actual).slice(0, 80)}` })
).annotations({ description: "The IANA time zone the budget period's windows are counted in (default UTC)." })

export const MaxConcurrent = integerFrom(1, MAX_CONCURRENT, `Calls in flight at once: 1 to ${MAX_CONCURRENT}; absent or null: no limit.`)

/** No control character (NUL, line breaks, tabs, C1) and no lone surrogate (`u`: a lone surrogate is a code point of category Cs). */
const NAME_CHARACTERS = /^[^\p{Cc}\p{Cs}]*$/u

/** Whether `s` has at most `max` code points, without splitting a long string into an array. */
const atMostCodePoints = (s: string, max: number): boolean => {
  if (s.length <= max) return true
  if (s.length > 2 * max) return false
  let n = 0
  for (const _ of s) if (++n > max) return false
  return true
}

/**
 * A project's name as decoded: at most 200 characters, none of them a control character, well-formed
 * Unicode. Blank (after trimming) is the service's refusal (`name must be a non-empty string.`), which
 * also trims what it stores. The messages never echo the name: it may be long.
 */
export const ProjectName = Schema.String.pipe(
  Schema.filter((s) => atMostCodePoints(s, MAX_NAME_LENGTH), {
    message: () => `Expected at most ${MAX_NAME_LENGTH} characters`,
    jsonSchema: { maxLength: MAX_NAME_LENGTH }
  }),
  Schema.filter((s) => NAME_CHARACTERS.test(s), {
    message: () => "Expected no control characters and well-formed Unicode (no lone surrogates)",
    jsonSchema: { pattern: NAME_CHARACTERS.source }
  })
).annotations({
  description: `1 to ${MAX_NAME_LENGTH} characters, not blank; no control characters; well-formed Unicode. Leading and trailing white space is removed.`
})

/** `org_` and 1–60 of a-z, 0-9, `_`, `-` (generated ones: `org_` and 20 base32 characters, src/domain/ids.ts). */
const ORGANIZATION = /^org_[a-z0-9][a-z0-9_-]{0,59}$/

export const Organization = Schema.String.pipe(
  Schema.pattern(ORGANIZATION, { message: () => "Expected org_ followed by 1 to 60 of a-z, 0-9, _ and - (starting with a letter or digit)" })
).annotations({ description: "The organization id, org_…; generated when absent." })

/**
 * A field checked against its schema outside HTTP decoding (the services): the value, or the 400 the
 * decode would answer, naming `param` with the schema's message (src/http/errors.ts `decodeFailure`).
 */
export const checkField = <A>(schema: Schema.Schema<A>, param: string, value: A): Effect.Effect<A, InvalidRequest> =>
  Effect.mapError(Schema.validate(schema)(value), (e) => new InvalidRequest({ message: `Invalid ${param}: ${ParseResult.ArrayFormatter.formatErrorSync(e)[0]?.message ?? e.message}`, param }))

/** A key's or an end user's own upstream limits as stored (issue 41 item 3; null: none). */
export interface UpstreamLimitFields {
  readonly tokensPerMinute: number | null
  readonly maxConcurrent: number | null
}

/** An admin body's `rate_limit` limits, each checked against its bounds (absent or null: none): a 400 names `rate_limit.<field>`. */
export const checkUpstreamLimits = (
  given: { readonly tokens_per_minute?: number | null | undefined; readonly max_concurrent?: number | null | undefined } | undefined
): Effect.Effect<UpstreamLimitFields, InvalidRequest> =>
  Effect.all({
    tokensPerMinute: given?.tokens_per_minute == null ? Effect.succeed(null) : checkField(TokensPerMinute, "rate_limit.tokens_per_minute", given.tokens_per_minute),
    maxConcurrent: given?.max_concurrent == null ? Effect.succeed(null) : checkField(MaxConcurrent, "rate_limit.max_concurrent", given.max_concurrent)
  })

/** The limits set, as an answer shows them (`{}` when none is). */
export const shownUpstreamLimits = (l: UpstreamLimitFields): { tokens_per_minute?: number; max_concurrent?: number } => ({
  ...(l.tokensPerMinute === null ? {} : { tokens_per_minute: Number(l.tokensPerMinute) }),
  ...(l.maxConcurrent === null ? {} : { max_concurrent: Number(l.maxConcurrent) })
})
