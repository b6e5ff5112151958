/** What a store hands the audit (spec/audit.ts): its rows, with SQL column names, and the audit's scope and summary. */
import type { FindingKind } from "./findings.ts"


export interface KeyRow {
  readonly id: string
  readonly public_key: string
  readonly retired_at: number | null
}

export interface RateCardRow {
  readonly version: string
  readonly effective_from: string
  /** JSON text of the prices per route, as frozen in table rate_cards. */
  readonly prices: string
}

export interface ProjectRow {
  readonly id: string
  readonly budget_credits: number
  /** When the cap last changed (the project's updated_at), for the grandfathered-cap rule (spec/ledger.ts). */
  readonly updated_at?: number | undefined
}

export interface WindowRow {
  readonly project_id: string
  readonly period: string
  readonly spent: number
  readonly reserved: number
  /** When the window's latest reservation was made (null: none). */
  readonly last_hold_at?: number | null | undefined
}

export interface ChainHeadRow {
  readonly project_id: string
  readonly seq: number
  readonly hash: string
}

export interface RequestRow {
  readonly id: string
  readonly project_id: string
  readonly environment: string
  readonly status: string
  readonly receipt_id: string | null
  readonly credits_charged: number | null
  readonly credits_reserved: number
  readonly rate_card_version: string | null
  readonly created_at: number
}

export interface ReservationRow {
  readonly id: string
  readonly project_id: string
  readonly period: string
  readonly amount: number
  readonly state: string
  readonly charge: number | null
}

/** A receipts row joined with its request and its reservation (null when missing). */
export interface ReceiptRow {
  readonly id: string
  readonly request_id: string
  readonly project_id: string
  readonly environment: string
  readonly period: string
  readonly seq: number
  readonly credits_charged: number
  readonly rate_card_version: string
  readonly body: string
  readonly prev_hash: string
  readonly hash: string
  readonly signature: string
  readonly signing_key_id: string
  readonly created_at: number
  readonly request: RequestRow | null
  readonly reservation: ReservationRow | null
}

export interface HeldReservationRow {
  readonly id: string
  readonly project_id: string
  readonly period: string
  readonly amount: number
}

/** A request that completed, or whose reservation settled, and that has no receipt. */
export interface UnreceiptedRow {
  readonly request_id: string
  readonly project_id: string
  readonly request_status: string | null
  readonly reservation_id: string | null
  readonly reservation_state: string | null
}

/** An idempotency record joined with its request and that request's receipt (null when missing). */
export interface IdempotencyRow {
  readonly project_id: string
  readonly environment: string
  readonly key: string
  readonly request_id: string
  readonly state: string
  readonly status: number | null
  /** The stored response, replayed byte for byte. */
  readonly body: Uint8Array | string | null
  readonly request_status: string | null
  readonly receipt_id: string | null
  readonly receipt_project_id: string | null
  readonly receipt_environment: string | null
  readonly receipt_credits_charged: number | null
}

export interface AuditScope {
  readonly project?: string | undefined
  /** "YYYY-MM": only this window's sums and caps are checked. */
  readonly period?: string | undefined
}

export interface AuditStats {
  receipts: number
  chains: number
  windows: number
  heldReservations: number
  idempotencyRecords: number
  rateCards: number
  keys: number
}

export interface AuditSummary {
  readonly clean: boolean
  readonly findings: number
  readonly byKind: Readonly<Partial<Record<FindingKind, number>>>
  readonly stats: AuditStats
}

