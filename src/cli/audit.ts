/** Placeholder until the audit lands (issue: verifiable billing). */
export const auditCommand = async (_argv: ReadonlyArray<string>): Promise<number> => {
  process.stderr.write("tollgate audit is not built yet\n")
  return 2
}
