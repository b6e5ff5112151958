/**
 * A migration that is a list of statements a dialect: PostgreSQL's (functions, triggers) and SQLite's
 * (none when the migration is PostgreSQL's alone), each run in order.
 */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export const statementsByDialect = (statements: { readonly pg: ReadonlyArray<string>; readonly sqlite?: ReadonlyArray<string> }) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    const run = (list: ReadonlyArray<string>) => Effect.forEach(list, (s) => sql.unsafe(s), { discard: true })
    return sql.onDialectOrElse({ pg: () => run(statements.pg), orElse: () => run(statements.sqlite ?? []) })
  })
