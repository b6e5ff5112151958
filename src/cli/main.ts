#!/usr/bin/env node
/**
 * `tollgate` — the command line.
 *
 *   tollgate serve                                  start the gateway (same as npm start)
 *   tollgate projects create --name N --budget C --rpm R [--burst B] [--tpm T] [--max-concurrent M] [--organization O] [--budget-period month|week|day|total] [--time-zone Z]
 *   tollgate projects list [--limit N] [--cursor C] [--all]     one page (a page's next_cursor as --cursor), or every page
 *   tollgate projects get <prj_id>
 *   tollgate projects update <prj_id> [--name N] [--budget C] [--rpm R] [--burst B] [--tpm T|none] [--max-concurrent M|none] [--budget-period P] [--time-zone Z]
 *   tollgate keys create <prj_id> [--environment development|staging|production] [--tpm T] [--max-concurrent M] [--budget C]
 *   tollgate keys list <prj_id> [--limit N] [--cursor C] [--all]
 *   tollgate keys rotate <key_id> [--grace-seconds S]
 *   tollgate keys revoke <key_id>
 *   tollgate keys budget <key_id> [--budget C|none]                  a key's budget and window; --budget sets it (issue 41)
 *   tollgate projects end-user-budget <prj_id> [--budget C|none]     the default budget of the project's end users
 *   tollgate projects end-users <prj_id> [--order spent] [--limit N] [--cursor C] [--all]   the end users with a budget of their own; --order spent: the window's top spenders
 *   tollgate projects key-budgets <prj_id> [--limit N] [--cursor C] [--all]   the project's keys that have a budget, with their windows
 *   tollgate projects end-user <prj_id> <user> [--budget C|none [--tpm N] [--max-concurrent N]] [--delete]   one end user's override: read, set, or remove
 *   tollgate audit [--project P] [--period YYYY-MM] [--json]
 *   tollgate export <prj_id> [--period YYYY-MM] [--out file] [--limit N]   a project's receipts as JSON Lines (admin API)
 *   tollgate statement <prj_id> <YYYY-MM> [--out file]   a closed period's signed statement (admin API)
 *   tollgate verify-receipt <receipt.json> [--public-key key.pem | --url http://host:port]
 *   tollgate verify <export.jsonl> [--checkpoints F] [--statement F] [--keys F]   offline, exit 1 on any finding
 *   tollgate webhooks create|list|get|update|delete|rotate-secret|deliveries|retry …   (src/cli/webhooks.ts)
 *   tollgate events list [--type T] [--since ISO]
 *
 * Admin commands call the running gateway's admin API (TOLLGATE_URL, default http://localhost:8080,
 * with TOLLGATE_ADMIN_TOKEN), so the server stays the only writer of its store.
 */
import { adminCommand } from "./admin.ts"

const usage = `usage: tollgate <serve|projects|keys|webhooks|events|audit|export|statement|verify|verify-receipt> ...  (see README.md, "CLI")`

const main = async (argv: ReadonlyArray<string>): Promise<number> => {
  const [command, ...rest] = argv
  switch (command) {
    case "serve":
      await import("../main.ts")
      return new Promise<number>(() => {})
    case "projects":
    case "keys":
      return adminCommand(command, rest)
    case "webhooks":
    case "events":
      return (await import("./webhooks.ts")).webhooksCommand(command, rest)
    case "audit": {
      const { auditCommand } = await import("./audit.ts")
      return auditCommand(rest)
    }
    case "verify":
      return (await import("./verify.ts")).verifyCommand(rest)
    case "export":
      return (await import("./export.ts")).exportCommand(rest)
    case "statement":
      return (await import("./statement.ts")).statementCommand(rest)
    case "verify-receipt": {
      const { verifyReceiptCommand } = await import("./verifyReceipt.ts")
      return verifyReceiptCommand(rest)
    }
    case undefined:
    case "help":
    case "--help":
    case "-h":
      process.stdout.write(`${usage}\n`)
      return command === undefined ? 2 : 0
    default:
      process.stderr.write(`unknown command: ${command}\n${usage}\n`)
      return 2
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`tollgate: ${err instanceof Error ? err.message : String(err)}\n`)
    process.exit(1)
  }
)
