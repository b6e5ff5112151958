/**
 * `tollgate audit`: check a live store against the rulebook (spec/audit.ts), through the store reader
 * (src/store/auditReader.ts).
 *
 *   tollgate audit [--database sqlite:./data/tollgate.db | --database-url postgres://…] [--project prj_…]
 *                  [--period YYYY-MM] [--public-key key.pem]… [--jobs N] [--json] [--limit N]
 *                  [--progress | --quiet]
 *
 * Exit code: 0 clean, 1 findings, 2 the audit could not run.
 */
import { readFileSync } from "node:fs"
import { availableParallelism } from "node:os"
import { parseArgs } from "node:util"
import { findingKinds } from "../../spec/audit.ts"
import { type AuditResult, auditStore, openAuditSource } from "../store/auditReader.ts"
import { auditStatements, withStatements } from "../store/statementsAudit.ts"
import { findingLines } from "./commandText.ts"

export { type AuditOptions, type AuditResult, auditStore, databaseFile } from "../store/auditReader.ts"

// ---------------------------------------------------------------------------------------------
// Command line

const usage = `usage: tollgate audit [--database sqlite:<path> | postgres://…] [--project prj_…] [--period YYYY-MM]
                      [--public-key key.pem]… [--jobs N] [--json] [--limit N] [--progress | --quiet]
  --database     the store: sqlite:<path>, a file path, or postgres://… (alias --database-url;
                 default: DATABASE_URL, else sqlite:./data/tollgate.db)
  --public-key   trust only this receipt public key (repeatable; default: the store's receipt_keys)
  --jobs         signature worker threads (default: the available parallelism; 0: this thread)
  --limit        findings listed in detail (default 1000; all are counted)
exit code: 0 clean, 1 findings, 2 the audit could not run`

export const renderHuman = (r: AuditResult): string => {
  const s = r.summary
  const lines: Array<string> = []
  lines.push(`Tollgate audit of ${r.database}`)
  lines.push(`  scope:   ${r.scope.project ?? "all projects"}, ${r.scope.period ?? "all periods"}`)
  lines.push(
    `  checked: ${s.stats.receipts} receipts in ${s.stats.chains} chain(s), ${s.stats.windows} budget window(s), ` +
      `${s.stats.heldReservations} held reservation(s), ${s.stats.idempotencyRecords} idempotency record(s), ` +
      `${s.stats.rateCards} rate card(s), ${s.stats.keys} public key(s) (${r.keySource === "pinned" ? "pinned" : "from the store"})`
  )
  lines.push(`  time:    ${(r.durationMs / 1000).toFixed(2)} s (${r.receiptsPerSecond} receipts/s, ${r.jobs} signature worker(s), Ed25519 by ${r.ed25519})`)
  lines.push(...findingLines({ count: s.findings, byKind: s.byKind, kinds: findingKinds, listed: r.findings, omitted: r.omitted }))
  return lines.join("\n")
}

export const auditCommand = async (argv: ReadonlyArray<string>): Promise<number> => {
  let values: {
    database?: string | undefined
    "database-url"?: string | undefined
    jobs?: string | undefined
    project?: string | undefined
    period?: string | undefined
    "public-key"?: Array<string> | undefined
    json?: boolean | undefined
    limit?: string | undefined
    progress?: boolean | undefined
    quiet?: boolean | undefined
    help?: boolean | undefined
  }
  try {
    values = parseArgs({
      args: [...argv],
      options: {
        database: { type: "string" },
        "database-url": { type: "string" },
        jobs: { type: "string" },
        project: { type: "string" },
        period: { type: "string" },
        "public-key": { type: "string", multiple: true },
        json: { type: "boolean" },
        limit: { type: "string" },
        progress: { type: "boolean" },
        quiet: { type: "boolean" },
        help: { type: "boolean", short: "h" }
      },
      allowPositionals: false
    }).values
  } catch (e) {
    process.stderr.write(`${(e as Error).message}\n${usage}\n`)
    return 2
  }
  if (values.help === true) {
    process.stdout.write(`${usage}\n`)
    return 0
  }
  const limit = values.limit === undefined ? 1000 : Number(values.limit)
  if (!Number.isSafeInteger(limit) || limit < 0) {
    process.stderr.write(`--limit must be a non-negative integer\n${usage}\n`)
    return 2
  }
  const jobs = values.jobs === undefined ? availableParallelism() : Number(values.jobs)
  if (!Number.isSafeInteger(jobs) || jobs < 0) {
    process.stderr.write(`--jobs must be a non-negative integer\n${usage}\n`)
    return 2
  }
  const showProgress = values.progress === true || (values.quiet !== true && process.stderr.isTTY === true)
  try {
    const publicKeys = (values["public-key"] ?? []).map((path) => readFileSync(path, "utf8"))
    const database = values.database ?? values["database-url"] ?? (process.env["DATABASE_URL"] || "sqlite:./data/tollgate.db")
    const audited = await auditStore({
      database,
      jobs,
      project: values.project,
      period: values.period,
      publicKeys,
      limit,
      onProgress: showProgress
        ? ({ receipts, total, elapsedMs }) =>
            process.stderr.write(
              `audit: ${receipts}/${total} receipts (${total > 0 ? Math.min(100, Math.floor((receipts * 100) / total)) : 100}%), ${Math.round((receipts * 1000) / elapsedMs)}/s\n`
            )
        : undefined
    })
    // the stored monthly statements against their periods' receipts (issue 43)
    const { source } = await openAuditSource(database)
    const result = withStatements(audited, await auditStatements(source, audited.scope, publicKeys).finally(() => source.close()), limit)
    if (values.json === true) {
      process.stdout.write(
        `${JSON.stringify({
          clean: result.summary.clean,
          database: result.database,
          engine: result.engine,
          jobs: result.jobs,
          ed25519: result.ed25519,
          scope: { project: result.scope.project ?? null, period: result.scope.period ?? null },
          key_source: result.keySource,
          stats: { ...result.summary.stats, statements: result.statementsChecked },
          duration_ms: Math.round(result.durationMs),
          receipts_per_second: result.receiptsPerSecond,
          findings_total: result.summary.findings,
          by_kind: result.summary.byKind,
          findings: result.findings,
          omitted: result.omitted
        })}\n`
      )
    } else {
      process.stdout.write(`${renderHuman(result)}\n  statements: ${result.statementsChecked} checked against their periods' receipts\n`)
    }
    return result.summary.clean ? 0 : 1
  } catch (e) {
    process.stderr.write(`tollgate audit: ${(e as Error).message}\n`)
    return 2
  }
}
