/**
 * The WAL index of a SQLite file in WAL mode (its `-shm` file, https://sqlite.org/walformat.html):
 * how many frames the WAL holds and how many of them a checkpoint has already copied into the
 * database file. The store worker reads it after each batch to decide when to checkpoint
 * (src/store/storeWorker.ts); it is a hint, read without SQLite's locks, never a decision about data.
 */
import { openSync, readSync } from "node:fs"
import { endianness } from "node:os"

export interface WalIndex {
  /** The last valid frame of the WAL (`mxFrame`, the index header's word at byte 16). */
  readonly frames: number
  /** Frames already copied into the database file (`nBackfill`, the checkpoint info's first word, byte 96). */
  readonly backfilled: number
}

const HEADER_BYTES = 100

/** A reader of `<filename>-shm`, opened on first use; the file is in the host's byte order. */
export const walIndexReader = (filename: string): (() => WalIndex) => {
  const bytes = Buffer.alloc(HEADER_BYTES)
  const u32 = endianness() === "LE" ? (at: number) => bytes.readUInt32LE(at) : (at: number) => bytes.readUInt32BE(at)
  let fd: number | undefined
  return () => {
    readSync((fd ??= openSync(`${filename}-shm`, "r")), bytes, 0, HEADER_BYTES, 0)
    return { frames: u32(16), backfilled: u32(96) }
  }
}
