/**
 * The chain checks of the audit: each project's receipts in seq order, each linking to the one before
 * (prev_hash), from the genesis hash or from where a partial walk starts; at the end, the stored chain
 * heads against the last receipt walked. The checker (spec/audit.ts) calls these in chain order.
 */
import { GENESIS_HASH } from "../receipt.ts"
import type { Report } from "./findings.ts"
import type { AuditScope, ChainHeadRow, ReceiptRow } from "./rows.ts"

interface ChainState {
  /** The seq the next receipt must carry. */
  expected: number
  /** The hash of the receipt before the next one; undefined when a partial walk starts mid-chain without it. */
  lastHash: string | undefined
  lastSeq: number
  /** The previous receipt was already reported as misplaced: its link to the next one is not reported again. */
  lastFlagged: boolean
  fromGenesis: boolean
  /** A partial walk found no receipt just before its start: the next receipt follows a gap. */
  gapBefore: boolean
}

export const makeChainChecks = (report: Report) => {
  const heads = new Map<string, ChainHeadRow>()
  const chains = new Map<string, ChainState>()

  const chainHeads = (rows: Iterable<ChainHeadRow>) => {
    for (const row of rows) heads.set(row.project_id, row)
  }

  const chainStart = (project: string, seq: number, prevHash: string | undefined) => {
    chains.set(project, {
      expected: seq,
      lastHash: prevHash,
      lastSeq: seq - 1,
      lastFlagged: false,
      fromGenesis: seq <= 1 && prevHash === GENESIS_HASH,
      gapBefore: prevHash === undefined
    })
  }

  /** Chain position of one receipt; returns nothing, reports what is wrong with its place. */
  const check = (row: ReceiptRow, bodySeq: number, prevHash: string, hash: string) => {
    let st = chains.get(row.project_id)
    if (st === undefined) {
      st = { expected: 1, lastHash: GENESIS_HASH, lastSeq: 0, lastFlagged: false, fromGenesis: true, gapBefore: false }
      chains.set(row.project_id, st)
    }
    let flagged = false
    if (bodySeq !== row.seq || row.seq < st.expected) {
      report("chain_order", row.id, row.project_id, `receipt ${row.id} is at position ${row.seq} of the chain but its signed seq is ${bodySeq}`, {
        position: row.seq,
        signed_seq: bodySeq
      })
      flagged = true
    } else if (row.seq > st.expected || st.gapBefore) {
      const from = st.gapBefore ? Math.min(st.expected, row.seq) - 1 : st.expected
      report("chain_gap", row.id, row.project_id, `receipts ${from}..${row.seq - 1} of project ${row.project_id} are missing before ${row.id}`, {
        missing_from_seq: from,
        missing_to_seq: row.seq - 1
      })
      flagged = true
    } else if (st.lastHash !== undefined && prevHash !== st.lastHash && !st.lastFlagged) {
      report("chain_broken", row.id, row.project_id, `receipt ${row.id} (seq ${row.seq}) does not link to the receipt before it`, {
        prev_hash: prevHash,
        expected_prev_hash: st.lastHash
      })
    }
    st.expected = row.seq + 1
    st.lastSeq = row.seq
    st.lastHash = hash
    st.lastFlagged = flagged
    st.gapBefore = false
  }

  /** The stored heads against the chains walked (whole chains only); answers how many chains were walked. */
  const finish = (scope: AuditScope): number => {
    // Heads are only comparable when whole chains were walked (no period filter).
    if (scope.period === undefined) {
      for (const [project, st] of chains) {
        if (!st.fromGenesis) continue
        const head = heads.get(project)
        if (head === undefined || head.seq !== st.lastSeq || head.hash !== st.lastHash) {
          report("chain_head_mismatch", project, project, `the chain head of ${project} is ${head === undefined ? "missing" : `seq ${head.seq}`}; its last receipt is seq ${st.lastSeq}`, {
            head_seq: head?.seq ?? null,
            last_seq: st.lastSeq
          })
        }
      }
      for (const [project, head] of heads) {
        if (chains.has(project) || head.seq === 0) continue
        if (scope.project !== undefined && scope.project !== project) continue
        report("chain_head_mismatch", project, project, `the chain head of ${project} is seq ${head.seq}, but the project has no receipts`, { head_seq: head.seq, last_seq: 0 })
      }
    }
    return chains.size
  }

  return { chainHeads, chainStart, check, finish } as const
}
