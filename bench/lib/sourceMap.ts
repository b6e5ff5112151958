/**
 * Where a V8 profile frame is in the TypeScript source. tsx compiles each file to a few long lines,
 * so a profile's raw frames all read `file.ts:1`; the source map tsx registers knows the real line.
 */
import { findSourceMap } from "node:module"

export interface Frame {
  readonly url: string
  /** 0-based, as V8 reports them. */
  readonly lineNumber: number
  readonly columnNumber: number
}

/** The frame's 0-based line and column in its TypeScript source, or its own position when no map knows it. */
export const sourcePosition = (frame: Frame): { readonly line: number; readonly column: number } => {
  const entry =
    frame.url === "" ? undefined : (findSourceMap(frame.url)?.findEntry(frame.lineNumber, frame.columnNumber) as { originalLine?: number; originalColumn?: number } | undefined)
  return entry?.originalLine !== undefined && entry.originalColumn !== undefined
    ? { line: entry.originalLine, column: entry.originalColumn }
    : { line: frame.lineNumber, column: frame.columnNumber }
}
