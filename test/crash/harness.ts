/**
 * The crash and shutdown suites' vitest harness: the bundled server, a mock upstream and a fresh store,
 * set up before a file's tests and disposed of after them. Apart from test/crash/support.ts, which
 * `npm run bench -- --soak` (bench/soak.ts) imports outside vitest: a file that imports "vitest" can
 * only be loaded by vitest itself.
 */
import { afterAll, beforeAll } from "vitest"
import { type MockUpstream, startMockUpstream } from "../support/mockUpstream.ts"
import { buildServer, newStore, type Store } from "./support.ts"

/** A harness test file's world: the bundled server, a mock upstream, a fresh store routed to it. */
export interface Harness {
  /** The bundled server's entry (buildServer). */
  readonly main: string
  readonly upstream: MockUpstream
  readonly store: Store
}

/**
 * Sets up a test file's Harness before its tests and disposes of it after them (vitest hooks of the
 * calling file). Its fields are there from the first test on.
 */
export const useHarness = (): Harness => {
  let server: { readonly main: string; readonly dispose: () => void } | undefined
  let upstream: MockUpstream | undefined
  let store: Store | undefined
  beforeAll(async () => {
    server = await buildServer()
    upstream = await startMockUpstream({ record: false })
    store = newStore(upstream.url)
  })
  afterAll(async () => {
    await upstream?.close()
    server?.dispose()
    store?.dispose()
  })
  const ready = <A>(a: A | undefined): A => {
    if (a === undefined) throw new Error("the harness is read before its beforeAll ran")
    return a
  }
  return {
    get main() {
      return ready(server).main
    },
    get upstream() {
      return ready(upstream)
    },
    get store() {
      return ready(store)
    }
  }
}
