/**
 * Gateway processes for the multi-instance tests (test/start): the bundle `npm start` runs, started
 * with an environment, each with its own receipt key file and instance id, resolved once it prints
 * its banner (its origin read from it).
 */
import { type ChildProcess, spawn } from "node:child_process"
import { join } from "node:path"

export interface Instance {
  child: ChildProcess
  origin: string
  out: string
}

/** Start instance `i` of the bundle built into `dir`/dist, with `env`. */
export const startInstance = (dir: string, i: number, env: Record<string, string>): Promise<Instance> => {
  const child = spawn(process.execPath, [join(dir, "dist/main.mjs")], {
    env: { ...env, TOLLGATE_RECEIPT_KEY_FILE: join(dir, `key-${i}.pem`), TOLLGATE_INSTANCE_ID: `node-${i}` },
    stdio: ["ignore", "pipe", "pipe"]
  })
  const node: Instance = { child, origin: "", out: "" }
  child.stderr!.on("data", (c: Buffer) => (node.out += c.toString()))
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`instance ${i}: no banner within 60 s: ${node.out}`)), 60_000)
    child.stdout!.on("data", (c: Buffer) => {
      node.out += c.toString()
      const url = /listening on (http:\/\/\S+) /.exec(node.out)
      if (url && node.origin === "") {
        clearTimeout(timer)
        node.origin = url[1]!.replace("localhost", "127.0.0.1")
        resolve(node)
      }
    })
    child.once("exit", (code) => reject(new Error(`instance ${i} exited ${code}: ${node.out}`)))
  })
}
