/**
 * Budget ledger rules (docs/contract.md §4): the reference model of reservations and settlement.
 *
 * Each project has one account per settlement window (a calendar month in UTC, written "YYYY-MM"):
 *   cap      - the most Credits the window may commit,
 *   spent    - Credits charged by settled requests,
 *   reserved - Credits held by requests still running (their worst case).
 *
 * The life of a request's money is two-phase, like a TigerBeetle pending transfer:
 *   reserve(worst case)  ->  settle(actual charge ≤ worst case)  or  void (charge nothing).
 * A reservation is resolved at most once, so budget can neither leak nor be counted twice.
 *
 * The rule that matters most: a reservation is admitted only if spent + reserved + amount ≤ cap.
 * Settling and voiding only ever lower spent + reserved, so the guard on reserve is enough to keep
 * spent + reserved ≤ cap at every instant.
 *
 * Everything here is a pure function `(state, command) -> { state, outcome }` on immutable data.
 * A command that fails returns the state it was given, unchanged.
 */

// ---------------------------------------------------------------------------------------------
// Settlement windows

/** A settlement window: calendar month in UTC, "YYYY-MM". */
export type Period = string

const pad2 = (n: number): string => String(n).padStart(2, "0")

/** The window an instant (milliseconds since the epoch, years 0000-9999) belongs to. */
export const periodOf = (millis: number): Period => {
  const d = new Date(millis)
  return `${String(d.getUTCFullYear()).padStart(4, "0")}-${pad2(d.getUTCMonth() + 1)}`
}

/** True for a well-formed "YYYY-MM" with a month 01..12. */
export const isPeriod = (s: string): boolean => /^\d{4}-(0[1-9]|1[0-2])$/.test(s)

/** The window's instants: [startMillis, endMillis). Assumes `isPeriod(period)`. */
export const periodBounds = (period: Period): { readonly startMillis: number; readonly endMillis: number } => {
  const year = Number(period.slice(0, 4))
  const month = Number(period.slice(5, 7)) - 1
  return { startMillis: Date.UTC(year, month, 1), endMillis: Date.UTC(year, month + 1, 1) }
}

// ---------------------------------------------------------------------------------------------
// State

export interface Account {
  readonly project: string
  readonly period: Period
  readonly cap: number
  readonly spent: number
  readonly reserved: number
  /**
   * An operator may lower a cap below what is already committed (spent + reserved). Those
   * commitments are honoured, never added to: this records their total at the moment of the
   * lowering, so the no-overspend invariant can be checked on the state alone. 0 when the cap
   * was never lowered below the commitments.
   */
  readonly grandfathered: number
}

export type ReservationState = "held" | "settled" | "voided"

export interface Reservation {
  readonly id: string
  readonly project: string
  readonly period: Period
  /** The worst case held against the budget. */
  readonly amount: number
  readonly state: ReservationState
  /** The Credits posted to `spent`; only once settled. */
  readonly charge?: number
}

/** Append-only record of every successful money movement; the audit trail the invariants check. */
export interface JournalEntry {
  readonly kind: "reserve" | "settle" | "void"
  readonly id: string
  readonly project: string
  readonly period: Period
  /** reserve: the amount held; settle: the charge posted; void: the amount released. */
  readonly amount: number
}

export interface LedgerState {
  /** The standing cap of each project: a new window opens with it. */
  readonly caps: ReadonlyMap<string, number>
  /** Accounts by `accountKey(project, period)`; a window's account exists once anything touched it. */
  readonly accounts: ReadonlyMap<string, Account>
  readonly reservations: ReadonlyMap<string, Reservation>
  readonly journal: ReadonlyArray<JournalEntry>
}

export const empty: LedgerState = { caps: new Map(), accounts: new Map(), reservations: new Map(), journal: [] }

/** Unambiguous map key for a (project, period) pair. */
export const accountKey = (project: string, period: Period): string => JSON.stringify([project, period])

/**
 * The account of a window, opening it if needed. Roll-over: a window nobody has touched yet starts
 * with nothing spent or reserved and the project's standing cap (0 for a project with no cap, so an
 * unknown project can spend nothing).
 */
export const accountOf = (state: LedgerState, project: string, period: Period): Account =>
  state.accounts.get(accountKey(project, period)) ?? {
    project,
    period,
    cap: state.caps.get(project) ?? 0,
    spent: 0,
    reserved: 0,
    grandfathered: 0
  }

/**
 * Credits a window still has for new reservations: its cap less what is spent and held, never
 * negative (a lowered cap can leave a window over it: grandfathered). The one statement of this rule:
 * the reservation's sizing (both stores), the quote and the usage views read it from here.
 */
export const available = (w: { readonly cap: number; readonly spent: number; readonly reserved: number }): number =>
  Math.max(0, w.cap - w.spent - w.reserved)

/** Credits still available for new reservations in a window (never negative). */
export const remaining = (state: LedgerState, project: string, period: Period): number => available(accountOf(state, project, period))

// ---------------------------------------------------------------------------------------------
// Commands and outcomes

export type Command =
  | { readonly _tag: "SetCap"; readonly project: string; readonly cap: number; readonly period: Period }
  | { readonly _tag: "Reserve"; readonly id: string; readonly project: string; readonly period: Period; readonly amount: number }
  | { readonly _tag: "Settle"; readonly id: string; readonly charge: number }
  | { readonly _tag: "Void"; readonly id: string }

export type Outcome =
  | { readonly _tag: "CapSet"; readonly project: string; readonly cap: number }
  | { readonly _tag: "Reserved"; readonly id: string; readonly amount: number; readonly remaining: number }
  | {
      readonly _tag: "BudgetExceeded"
      readonly amount: number
      readonly cap: number
      readonly spent: number
      readonly reserved: number
      readonly remaining: number
    }
  | { readonly _tag: "DuplicateReservation"; readonly id: string }
  | { readonly _tag: "Settled"; readonly id: string; readonly charge: number; readonly released: number }
  | { readonly _tag: "Voided"; readonly id: string; readonly released: number }
  | { readonly _tag: "ChargeExceedsReservation"; readonly id: string; readonly charge: number; readonly amount: number }
  | { readonly _tag: "AlreadyResolved"; readonly id: string; readonly state: "settled" | "voided" }
  | { readonly _tag: "UnknownReservation"; readonly id: string }
  /** Credits are whole, non-negative numbers; anything else is refused before it can corrupt a sum. */
  | { readonly _tag: "InvalidAmount"; readonly amount: number }

export interface Step {
  readonly state: LedgerState
  readonly outcome: Outcome
}

const isCredits = (n: number): boolean => Number.isSafeInteger(n) && n >= 0

const withAccount = (state: LedgerState, a: Account): ReadonlyMap<string, Account> =>
  new Map(state.accounts).set(accountKey(a.project, a.period), a)

/**
 * The account after commitments shrink (settle, void). Grandfathered commitments shrink with them,
 * so that once over the cap the commitments can only go down until they are back under it.
 */
const afterRelease = (a: Account, spent: number, reserved: number): Account => ({
  ...a,
  spent,
  reserved,
  grandfathered: spent + reserved > a.cap ? Math.min(a.grandfathered, spent + reserved) : 0
})

/**
 * Set a project's cap from `period` on: the standing cap (for windows not yet opened) and every
 * open window from `period` onwards. Earlier windows are closed history and keep their cap.
 * Lowering a cap below what is committed is allowed; then no reservation fits until settlements
 * bring the commitments back under the cap.
 */
export const setCap = (state: LedgerState, project: string, cap: number, period: Period): Step => {
  if (!isCredits(cap)) return { state, outcome: { _tag: "InvalidAmount", amount: cap } }
  const accounts = new Map(state.accounts)
  const touched = [...state.accounts.values()].filter((a) => a.project === project && a.period >= period)
  // Open the named window too, so its cap is fixed now even if the standing cap changes again later.
  if (!state.accounts.has(accountKey(project, period))) touched.push(accountOf(state, project, period))
  for (const a of touched) {
    const committed = a.spent + a.reserved
    accounts.set(accountKey(project, a.period), { ...a, cap, grandfathered: committed > cap ? committed : 0 })
  }
  return {
    state: { ...state, caps: new Map(state.caps).set(project, cap), accounts },
    outcome: { _tag: "CapSet", project, cap }
  }
}

/** Hold `amount` Credits for request `id`, if and only if spent + reserved + amount ≤ cap. */
export const reserve = (state: LedgerState, id: string, project: string, period: Period, amount: number): Step => {
  if (!isCredits(amount)) return { state, outcome: { _tag: "InvalidAmount", amount } }
  // Ids are never reused, even after resolution: a retry must not resurrect a settled reservation.
  if (state.reservations.has(id)) return { state, outcome: { _tag: "DuplicateReservation", id } }
  const a = accountOf(state, project, period)
  if (a.spent + a.reserved + amount > a.cap) {
    return {
      state,
      outcome: {
        _tag: "BudgetExceeded",
        amount,
        cap: a.cap,
        spent: a.spent,
        reserved: a.reserved,
        remaining: available(a)
      }
    }
  }
  // After an admitted reservation the commitments are within the cap again: nothing is grandfathered.
  const next: Account = { ...a, reserved: a.reserved + amount, grandfathered: 0 }
  return {
    state: {
      ...state,
      accounts: withAccount(state, next),
      reservations: new Map(state.reservations).set(id, { id, project, period, amount, state: "held" }),
      journal: [...state.journal, { kind: "reserve", id, project, period, amount }]
    },
    outcome: { _tag: "Reserved", id, amount, remaining: next.cap - next.spent - next.reserved }
  }
}

/** Why a reservation cannot be resolved, or the held reservation itself. */
const held = (state: LedgerState, id: string): Reservation | Outcome => {
  const r = state.reservations.get(id)
  if (r === undefined) return { _tag: "UnknownReservation", id }
  if (r.state !== "held") return { _tag: "AlreadyResolved", id, state: r.state }
  return r
}

const isOutcome = (x: Reservation | Outcome): x is Outcome => "_tag" in x

/** Post the actual charge (≤ the amount held) to spent and release the rest of the hold. At most once. */
export const settle = (state: LedgerState, id: string, charge: number): Step => {
  const r = held(state, id)
  if (isOutcome(r)) return { state, outcome: r }
  if (!isCredits(charge)) return { state, outcome: { _tag: "InvalidAmount", amount: charge } }
  // The reservation is the worst case; a bigger charge means the worst case was wrong, and posting it
  // could push spent + reserved over the cap. The caller decides what to post (pricing.settledCharge).
  if (charge > r.amount) return { state, outcome: { _tag: "ChargeExceedsReservation", id, charge, amount: r.amount } }
  const a = accountOf(state, r.project, r.period)
  return {
    state: {
      ...state,
      accounts: withAccount(state, afterRelease(a, a.spent + charge, a.reserved - r.amount)),
      reservations: new Map(state.reservations).set(id, { ...r, state: "settled", charge }),
      journal: [...state.journal, { kind: "settle", id, project: r.project, period: r.period, amount: charge }]
    },
    outcome: { _tag: "Settled", id, charge, released: r.amount - charge }
  }
}

/** Release the whole hold, charging nothing (failed request, crash recovery). At most once. */
export const voidReservation = (state: LedgerState, id: string): Step => {
  const r = held(state, id)
  if (isOutcome(r)) return { state, outcome: r }
  const a = accountOf(state, r.project, r.period)
  return {
    state: {
      ...state,
      accounts: withAccount(state, afterRelease(a, a.spent, a.reserved - r.amount)),
      reservations: new Map(state.reservations).set(id, { ...r, state: "voided" }),
      journal: [...state.journal, { kind: "void", id, project: r.project, period: r.period, amount: r.amount }]
    },
    outcome: { _tag: "Voided", id, released: r.amount }
  }
}

/** One entry point for model-based tests and replays. */
export const step = (state: LedgerState, command: Command): Step => {
  switch (command._tag) {
    case "SetCap":
      return setCap(state, command.project, command.cap, command.period)
    case "Reserve":
      return reserve(state, command.id, command.project, command.period, command.amount)
    case "Settle":
      return settle(state, command.id, command.charge)
    case "Void":
      return voidReservation(state, command.id)
  }
}

/** A model's `run` from its `step`: commands in order, the final state and every outcome. */
export const runner =
  <S, C, O>(stepOf: (state: S, command: C) => { readonly state: S; readonly outcome: O }) =>
  (state: S, commands: ReadonlyArray<C>): { readonly state: S; readonly outcomes: ReadonlyArray<O> } => {
    const outcomes: Array<O> = []
    let s = state
    for (const c of commands) {
      const r = stepOf(s, c)
      s = r.state
      outcomes.push(r.outcome)
    }
    return { state: s, outcomes }
  }

/** Run commands in order; returns the final state and every outcome. */
export const run = runner(step)

// ---------------------------------------------------------------------------------------------
// Invariants: the audit checks these on a live database, the tests after every command.

export type InvariantName =
  /** cap, spent, reserved and every amount are whole, non-negative Credits. */
  | "non-negative"
  /** spent + reserved ≤ cap, or ≤ the commitments grandfathered when the cap was lowered below them. */
  | "no-overspend"
  /** reserved == Σ amount of the window's held reservations. */
  | "reserved-equals-held"
  /** spent == Σ charge of the window's settled reservations. */
  | "spent-equals-settled"
  /** A settled charge never exceeds the amount that was reserved for it. */
  | "charge-within-reservation"
  /** The journal resolves (settles or voids) each reservation at most once, and agrees with its state. */
  | "resolved-at-most-once"
  /** Every reservation belongs to an existing account. */
  | "reservation-has-account"

export interface Violation {
  readonly invariant: InvariantName
  /** Which account or reservation, for the audit report. */
  readonly subject: string
}

/** Every violated invariant with its subject; empty when the ledger is sound. */
export const violations = (state: LedgerState): ReadonlyArray<Violation> => {
  const out: Array<Violation> = []
  const heldSum = new Map<string, number>()
  const settledSum = new Map<string, number>()

  for (const r of state.reservations.values()) {
    const key = accountKey(r.project, r.period)
    if (!isCredits(r.amount) || (r.charge !== undefined && !isCredits(r.charge))) {
      out.push({ invariant: "non-negative", subject: r.id })
    }
    if (!state.accounts.has(key)) out.push({ invariant: "reservation-has-account", subject: r.id })
    if (r.state === "held") heldSum.set(key, (heldSum.get(key) ?? 0) + r.amount)
    if (r.state === "settled") {
      const charge = r.charge ?? 0
      settledSum.set(key, (settledSum.get(key) ?? 0) + charge)
      if (r.charge === undefined || charge > r.amount) out.push({ invariant: "charge-within-reservation", subject: r.id })
    }
  }

  for (const [key, a] of state.accounts) {
    if (![a.cap, a.spent, a.reserved, a.grandfathered].every(isCredits)) out.push({ invariant: "non-negative", subject: key })
    if (a.spent + a.reserved > Math.max(a.cap, a.grandfathered)) out.push({ invariant: "no-overspend", subject: key })
    if (a.reserved !== (heldSum.get(key) ?? 0)) out.push({ invariant: "reserved-equals-held", subject: key })
    if (a.spent !== (settledSum.get(key) ?? 0)) out.push({ invariant: "spent-equals-settled", subject: key })
  }

  const resolutions = new Map<string, number>()
  for (const e of state.journal) {
    if (e.kind !== "reserve") resolutions.set(e.id, (resolutions.get(e.id) ?? 0) + 1)
  }
  for (const r of state.reservations.values()) {
    const n = resolutions.get(r.id) ?? 0
    if (n > 1 || (r.state === "held") !== (n === 0)) out.push({ invariant: "resolved-at-most-once", subject: r.id })
  }
  for (const id of resolutions.keys()) {
    if (!state.reservations.has(id)) out.push({ invariant: "resolved-at-most-once", subject: id })
  }
  return out
}

/** The names of the violated invariants, each once; empty when the ledger is sound. */
export const invariants = (state: LedgerState): ReadonlyArray<InvariantName> => [
  ...new Set(violations(state).map((v) => v.invariant))
]

// ---------------------------------------------------------------------------------------------
// Checkers over stored rows: the same rules, on what a store holds. One place for the window rules,
// called by `tollgate audit` (spec/audit.ts), by the model tests after every command
// (test/model/ledger), and by the store itself in assertion mode (TOLLGATE_ASSERT=1,
// src/store/chatTransactions.ts) after each settlement and abandonment.

/**
 * Grandfathered caps (docs/decisions/0004-grandfathered-caps.md): an operator may lower a cap below
 * what a window already committed; those commitments are honoured and never added to. A store keeps
 * no cap history, so on rows the rule reads: a window over its cap is grandfathered iff no hold in it
 * was made after the cap last changed — every hold admitted after the change had to fit under the
 * new cap, and settling or voiding only lowers spent + reserved, so a window that admitted a hold
 * since the change can only be over its cap by a fault. (The state model above tracks the exact
 * grandfathered amount; on rows this is the strongest form of the same rule.)
 */
export const grandfatheredOnRows = (capChangedAt: number | undefined, lastHoldAt: number | undefined): boolean =>
  capChangedAt !== undefined && (lastHoldAt === undefined || lastHoldAt <= capChangedAt)

/** What a store knows of one window. */
export interface WindowFacts {
  readonly cap: number
  readonly spent: number
  readonly reserved: number
  /** Σ credits_charged of the window's receipts. */
  readonly receiptSum: number
  /** Σ amount of the window's reservations still held. */
  readonly heldSum: number
  /** When the project's cap last changed (undefined: unknown, never grandfathered). */
  readonly capChangedAt?: number | undefined
  /** When the window's latest reservation was made (undefined: none). */
  readonly lastHoldAt?: number | undefined
}

export type WindowInvariant =
  /** spent and reserved are whole, non-negative Credits. */
  | "non-negative"
  /** spent == Σ receipts of the window (every charge has its receipt, no receipt without a charge). */
  | "spent-equals-receipts"
  /** reserved == Σ amount of the window's held reservations. */
  | "reserved-equals-held"
  /** spent + reserved ≤ cap (measured on the stored sums and on the rows), unless grandfathered. */
  | "no-overspend"

export interface WindowFinding {
  readonly invariant: WindowInvariant
  readonly detail: string
}

/** The window rules over one window's facts; empty when it is sound. */
export const checkWindow = (w: WindowFacts): ReadonlyArray<WindowFinding> => {
  const out: Array<WindowFinding> = []
  if (![w.spent, w.reserved].every(isCredits)) out.push({ invariant: "non-negative", detail: `spent ${w.spent}, reserved ${w.reserved}` })
  if (w.spent !== w.receiptSum) out.push({ invariant: "spent-equals-receipts", detail: `spent ${w.spent}, receipts sum ${w.receiptSum}` })
  if (w.reserved !== w.heldSum) out.push({ invariant: "reserved-equals-held", detail: `reserved ${w.reserved}, held sum ${w.heldSum}` })
  const committed = Math.max(w.spent + w.reserved, w.receiptSum + w.heldSum)
  if (committed > w.cap && !grandfatheredOnRows(w.capChangedAt, w.lastHoldAt)) {
    out.push({ invariant: "no-overspend", detail: `commits ${committed} over a cap of ${w.cap}` })
  }
  return out
}

/** Rows of a store, in the rulebook's words (a store maps its columns to these). */
export interface LedgerRows {
  readonly projects: ReadonlyArray<{ readonly id: string; readonly cap: number; readonly capChangedAt?: number | undefined }>
  readonly windows: ReadonlyArray<{ readonly project: string; readonly period: Period; readonly spent: number; readonly reserved: number }>
  readonly reservations: ReadonlyArray<{
    readonly id: string
    readonly requestId?: string | undefined
    readonly project: string
    readonly period: Period
    readonly amount: number
    readonly state: string
    readonly charge: number | null
    readonly createdAt?: number | undefined
  }>
  /** Whole chains: every receipt of each project named. */
  readonly receipts: ReadonlyArray<{
    readonly requestId: string
    readonly project: string
    readonly period: Period
    readonly seq: number
    readonly charge: number
    readonly prevHash: string
    readonly hash: string
  }>
}

export type RowInvariant =
  | WindowInvariant
  /** A settled charge never exceeds its reservation; a void charges 0; a hold has no charge yet. */
  | "charge-within-reservation"
  /** Exactly one receipt per settled reservation, none for a hold or a void, charging what it charged. */
  | "one-receipt-per-charge"
  /** A project's receipts chain: seq 1..n, each prev_hash the hash before it, the first the genesis hash. */
  | "chain"
  /** A reservation belongs to a window row. */
  | "reservation-has-account"

export interface RowFinding {
  readonly invariant: RowInvariant
  readonly subject: string
  readonly detail: string
}

/** The genesis of every chain (spec/receipt.ts GENESIS_HASH; repeated here to keep the ledger rules free of receipts). */
const GENESIS = "0".repeat(64)

/** Every ledger rule over a store's rows; empty when they are sound. */
export const checkLedgerRows = (rows: LedgerRows): ReadonlyArray<RowFinding> => {
  const out: Array<RowFinding> = []
  const caps = new Map(rows.projects.map((p) => [p.id, p]))
  const facts = new Map<string, { receiptSum: number; heldSum: number; lastHoldAt: number | undefined }>()
  const factsOf = (project: string, period: Period) => {
    const k = accountKey(project, period)
    let f = facts.get(k)
    if (f === undefined) facts.set(k, (f = { receiptSum: 0, heldSum: 0, lastHoldAt: undefined }))
    return f
  }
  const receiptsByRequest = new Map<string, Array<LedgerRows["receipts"][number]>>()
  for (const rc of rows.receipts) {
    factsOf(rc.project, rc.period).receiptSum += rc.charge
    receiptsByRequest.set(rc.requestId, [...(receiptsByRequest.get(rc.requestId) ?? []), rc])
  }
  const windowKeys = new Set(rows.windows.map((w) => accountKey(w.project, w.period)))
  for (const r of rows.reservations) {
    const f = factsOf(r.project, r.period)
    if (r.state === "held") f.heldSum += r.amount
    if (r.createdAt !== undefined && (f.lastHoldAt === undefined || r.createdAt > f.lastHoldAt)) f.lastHoldAt = r.createdAt
    if (!windowKeys.has(accountKey(r.project, r.period))) out.push({ invariant: "reservation-has-account", subject: r.id, detail: `no window ${r.project}/${r.period}` })
    const chargeOk =
      r.state === "settled" ? r.charge !== null && isCredits(r.charge) && r.charge <= r.amount : r.state === "voided" ? r.charge === 0 : r.state === "held" && r.charge === null
    if (!chargeOk) out.push({ invariant: "charge-within-reservation", subject: r.id, detail: `${r.state} with charge ${r.charge} of ${r.amount}` })
    if (r.requestId !== undefined) {
      const rcs = receiptsByRequest.get(r.requestId) ?? []
      const want = r.state === "settled" ? 1 : 0
      if (rcs.length !== want || (want === 1 && rcs[0]!.charge !== r.charge)) {
        out.push({ invariant: "one-receipt-per-charge", subject: r.id, detail: `${r.state}, ${rcs.length} receipt(s) charging ${rcs.map((x) => x.charge).join(", ")}` })
      }
    }
  }
  for (const w of rows.windows) {
    const f = factsOf(w.project, w.period)
    const p = caps.get(w.project)
    for (const finding of checkWindow({ cap: p?.cap ?? 0, spent: w.spent, reserved: w.reserved, ...f, capChangedAt: p?.capChangedAt })) {
      out.push({ ...finding, subject: `${w.project}/${w.period}` })
    }
  }
  const byProject = new Map<string, Array<LedgerRows["receipts"][number]>>()
  for (const rc of rows.receipts) byProject.set(rc.project, [...(byProject.get(rc.project) ?? []), rc])
  for (const [project, chain] of byProject) {
    const sorted = [...chain].sort((a, b) => a.seq - b.seq)
    sorted.forEach((rc, i) => {
      const prev = i === 0 ? GENESIS : sorted[i - 1]!.hash
      if (rc.seq !== i + 1 || rc.prevHash !== prev) out.push({ invariant: "chain", subject: project, detail: `receipt seq ${rc.seq} at position ${i + 1}${rc.prevHash !== prev ? ", prev_hash breaks the chain" : ""}` })
    })
  }
  return out
}
