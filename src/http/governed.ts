/**
 * The governed adapter: what both HTTP paths hand the Gateway for `POST /v1/chat/completions` and
 * `POST /v1/responses`, served only on the raw fast path (src/http/fast.ts) from `governedNow` (or
 * `governedCalls`) and `chatCallOf`. Its parity with the contract is checked by decoding its answers with the
 * document's schemas (test/http/contract.test.ts, test/http/fast.test.ts).
 */
import { Effect, Either } from "effect"
import type { GovernanceError } from "../domain/errors.ts"
import type { ChatCall } from "../services/Gateway.ts"
import type { Principal } from "../services/KeyRegistry.ts"
import { chatCompletionsSurface } from "../services/surfaces/chatCompletions.ts"
import { responsesSurface, responsesToChat } from "../services/surfaces/responses.ts"
import type { Surface } from "../services/surfaces/Surface.ts"

/** What a governed endpoint hands the Gateway: the surface that renders, and the chat body to govern. */
export type GovernedCall = (body: unknown) => Effect.Effect<{ readonly surface: Surface; readonly body: unknown }, GovernanceError>

type GovernedPath = "/v1/chat/completions" | "/v1/responses"

/** The same, decided with no effect: for a call begun with no fiber (Gateway.begin, docs/decisions/0037). */
export const governedNow: Readonly<Record<GovernedPath, (body: unknown) => Either.Either<{ readonly surface: Surface; readonly body: unknown }, GovernanceError>>> = {
  "/v1/chat/completions": (body) => Either.right({ surface: chatCompletionsSurface, body }),
  "/v1/responses": (body) => Either.map(responsesToChat(body), (chat) => ({ surface: responsesSurface(body as Record<string, unknown>), body: chat }))
}

/** The governed endpoints by path; the fast path (src/http/fast.ts) serves the same table. */
export const governedCalls: Readonly<Record<GovernedPath, GovernedCall>> = {
  "/v1/chat/completions": (body) => Effect.suspend(() => governedNow["/v1/chat/completions"](body)),
  "/v1/responses": (body) => Effect.suspend(() => governedNow["/v1/responses"](body))
}

/**
 * The governed call a request makes — its caller, surface and body, with its Idempotency-Key and
 * X-Max-Credits headers —: the one place a governed call is built. `deliver`: where its answer may
 * be sent apart from the call's effect (ChatCall.deliver).
 */
export const chatCallOf = (
  principal: Principal,
  surface: Surface,
  body: unknown,
  clientBody: unknown,
  requestHeaders: Readonly<Record<string, unknown>>,
  headers: Record<string, string>,
  deliver?: ChatCall["deliver"]
): ChatCall => {
  const text = (name: string) => (typeof requestHeaders[name] === "string" ? (requestHeaders[name] as string) : undefined)
  return { principal, surface, body, clientBody, idempotencyKeyHeader: text("idempotency-key"), maxCreditsHeader: text("x-max-credits"), headers, deliver }
}
