/** A store node (./pgStoreNode.ts) on a fresh schema for a vitest suite — apart, so benches import the node without vitest. */
import { afterAll, beforeAll } from "vitest"
import type { GatewaySettings } from "../../src/domain/config.ts"
import { ChatStore, type ChatStoreApi } from "../../src/store/ChatStore.ts"
import { freshSchema, type TestSchema } from "./pg.ts"
import { makePgStoreNode } from "./pgStoreNode.ts"

/**
 * One store node on a fresh schema for a test suite: made before its tests, disposed and the schema
 * dropped after. Call inside `describe`; read `node` and `store` in the tests.
 */
export const pgStoreForSuite = (settings: Partial<GatewaySettings> = {}) => {
  const suite = {} as { schema: TestSchema; node: ReturnType<typeof makePgStoreNode>; store: ChatStoreApi }
  beforeAll(async () => {
    suite.schema = freshSchema()
    suite.node = makePgStoreNode(suite.schema.url, settings)
    suite.store = await suite.node.runPromise(ChatStore)
  })
  afterAll(async () => {
    await suite.node?.dispose()
    suite.schema?.drop()
  })
  return suite
}
