/**
 * A minimal Server-Sent Events reader: bytes in, the `data` of each event out (multi-line data
 * joined with "\n", comments and other fields ignored), as the WHATWG EventSource spec reads them.
 */
import { Stream } from "effect"

export const sseData = <E>(bytes: Stream.Stream<Uint8Array, E>): Stream.Stream<string, E> =>
  bytes.pipe(
    Stream.decodeText(),
    Stream.splitLines,
    Stream.mapAccum([] as Array<string>, (data, line): [Array<string>, ReadonlyArray<string>] => {
      if (line === "") return data.length === 0 ? [data, []] : [[], [data.join("\n")]]
      if (line.startsWith("data:")) {
        data.push(line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5))
      }
      return [data, []]
    }),
    Stream.flattenIterables
  )
