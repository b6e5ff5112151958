// The store worker's entry: loads its TypeScript through tsx, as bin/tollgate.mjs does (no build step).
import { register } from "tsx/esm/api"
register()
await import("./storeWorker.ts")
