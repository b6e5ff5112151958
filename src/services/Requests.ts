/**
 * Governed request records, read side: created `pending` with the reservation, then `completed` (with
 * the receipt, in the settlement transaction) or `failed` — writes of the store port (src/store/ChatStore.ts). Reads are scoped to the caller's tenant: a
 * request of another project or environment answers exactly like an unknown id.
 */
import { Effect, Option } from "effect"
import { RequestNotFound } from "../domain/errors.ts"
import type { Scope } from "../store/idempotencyStatements.ts"
import { requestView } from "../store/requestStatements.ts"
import { RequestsRepo } from "../store/requestsRepo.ts"

export type { Attempt, Completion, Failure, NewRequest, Verification } from "../store/requestStatements.ts"

export class Requests extends Effect.Service<Requests>()("tollgate/Requests", {
  effect: Effect.gen(function* () {
    const repo = yield* RequestsRepo

    const find = (id: string, scope: Scope) =>
      Effect.flatMap(
        repo.find(id, scope).pipe(Effect.orDie),
        (rows) =>
          Option.match(Option.fromNullable(rows[0]), {
            onNone: () => Effect.fail(new RequestNotFound({ message: `No request with id ${id} in this project and environment.` })),
            onSome: (r) => Effect.succeed(requestView(r))
          })
      )

    return { find } as const
  }),
  dependencies: [RequestsRepo.Default]
}) {}
