/**
 * What the offline checking commands share: one file argument parsed with its options and usage
 * (`tollgate verify`, `tollgate verify-receipt`), and findings printed as `tollgate audit` prints them
 * (a count, a line a kind with what it means, a line a finding).
 */
import { parseArgs, type ParseArgsConfig } from "node:util"

/**
 * argv parsed with `options` and exactly one positional, or the exit code when it is not (2, usage
 * on stderr) or asks for help (0, usage on stdout).
 */
export const oneFileCommand = <O extends NonNullable<ParseArgsConfig["options"]>>(
  argv: ReadonlyArray<string>,
  options: O,
  usage: string
): { readonly values: ReturnType<typeof parseArgs<{ options: O; allowPositionals: true }>>["values"]; readonly file: string } | number => {
  let parsed: ReturnType<typeof parseArgs<{ options: O; allowPositionals: true }>>
  try {
    parsed = parseArgs({ args: [...argv], options: { ...options, help: { type: "boolean", short: "h" } }, allowPositionals: true }) as typeof parsed
  } catch (e) {
    process.stderr.write(`${(e as Error).message}\n${usage}\n`)
    return 2
  }
  if ((parsed.values as { help?: boolean }).help === true) {
    process.stdout.write(`${usage}\n`)
    return 0
  }
  if (parsed.positionals.length !== 1) {
    process.stderr.write(`${usage}\n`)
    return 2
  }
  return { values: parsed.values, file: parsed.positionals[0]! }
}

const pad = (s: string, n: number) => (s.length >= n ? s : s + " ".repeat(n - s.length))

export interface FindingsText<K extends string> {
  readonly count: number
  readonly byKind: Readonly<Partial<Record<K, number>>>
  readonly kinds: Readonly<Record<K, string>>
  readonly listed: ReadonlyArray<{ readonly kind: K; readonly subject: string; readonly message: string }>
  readonly omitted: number
}

/** The lines after a report's header: CLEAN, or the count, each kind's count and meaning, each finding. */
export const findingLines = <K extends string>(f: FindingsText<K>): Array<string> => {
  if (f.count === 0) return ["", "CLEAN: no findings."]
  const lines = ["", `FINDINGS: ${f.count}`]
  for (const [kind, n] of Object.entries(f.byKind) as Array<[K, number]>) lines.push(`  ${pad(kind, 34)} ${String(n).padStart(8)}   ${f.kinds[kind]}`)
  lines.push("")
  for (const x of f.listed) lines.push(`  ${pad(x.kind, 34)} ${pad(x.subject, 40)} ${x.message}`)
  if (f.omitted > 0) lines.push(`  … and ${f.omitted} more (raise --limit to list them)`)
  return lines
}
