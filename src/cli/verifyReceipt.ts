/** Placeholder until receipt verification lands (issue: verifiable billing). */
export const verifyReceiptCommand = async (_argv: ReadonlyArray<string>): Promise<number> => {
  process.stderr.write("tollgate verify-receipt is not built yet\n")
  return 2
}
