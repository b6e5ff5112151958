// The audit's signature worker entry: loads its TypeScript through tsx, as bin/tollgate.mjs does (no build step).
import { register } from "tsx/esm/api"
register()
await import("./auditWorker.ts")
