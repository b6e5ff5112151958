/**
 * Issue 19, finding 7: database files were created 0644 (readable by every local user: every
 * project's spend, every key's hash). Now the store's files are the owner's only, whatever the umask.
 */
import { statSync } from "node:fs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { useMockedGateway } from "../support/gateway.ts"

describe("store files (finding 7)", () => {
  const env = useMockedGateway({ beforeAll, afterAll })

  it("the database file and its -wal and -shm are 0600 after a governed call", async () => {
    const res = await fetch(`${env.gateway.url}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${env.gateway.devKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "auto", messages: [{ role: "user", content: "hi" }] })
    })
    expect(res.status).toBe(200)
    for (const file of [env.gateway.dbPath, `${env.gateway.dbPath}-wal`, `${env.gateway.dbPath}-shm`]) {
      expect((statSync(file).mode & 0o777).toString(8), file).toBe("600")
    }
  })
})
