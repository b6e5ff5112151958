/**
 * The governed adapter: what both HTTP paths hand the Gateway for `POST /v1/chat/completions` and
 * `POST /v1/responses`, served only on the raw fast path (src/http/fast.ts) from `governedNow` and
 * `chatCallOf`. Its parity with the contract is checked by decoding its answers with the
 * document's schemas (test/http/contract.test.ts, test/http/fast.test.ts).
 */
import { Either } from "effect"
import type { GovernanceError } from "../domain/errors.ts"
import type { ChatCall } from "../services/Gateway.ts"
import type { Principal } from "../services/KeyRegistry.ts"
import { chatCompletionsSurface } from "../services/surfaces/chatCompletions.ts"
import { responsesSurface, responsesToChat } from "../services/surfaces/responses.ts"
import type { Surface } from "../services/surfaces/Surface.ts"
import { header } from "./request.ts"

export type GovernedPath = "/v1/chat/completions" | "/v1/responses"

/**
 * What a governed endpoint hands the Gateway — the surface that renders, and the chat body to govern —,
 * decided with no effect (an `Either`, which is an effect too where one is wanted).
 */
export const governedNow: Readonly<Record<GovernedPath, (body: unknown) => Either.Either<{ readonly surface: Surface; readonly body: unknown }, GovernanceError>>> = {
  "/v1/chat/completions": (body) => Either.right({ surface: chatCompletionsSurface, body }),
  "/v1/responses": (body) => Either.map(responsesToChat(body), (chat) => ({ surface: responsesSurface(body as Record<string, unknown>), body: chat }))
}

/**
 * The governed call a request makes — its caller, surface and body, with its Idempotency-Key and
 * X-Max-Credits headers —: the one place a governed call is built. `deliver`: where its answer goes (ChatCall.deliver).
 */
export const chatCallOf = (
  principal: Principal,
  surface: Surface,
  body: unknown,
  clientBody: unknown,
  request: Parameters<typeof header>[0],
  headers: Record<string, string>,
  deliver: ChatCall["deliver"]
): ChatCall => ({
  principal,
  surface,
  body,
  clientBody,
  idempotencyKeyHeader: header(request, "idempotency-key"),
  maxCreditsHeader: header(request, "x-max-credits"),
  headers,
  deliver
})
