/**
 * One schema per wire shape: the types that other layers still write by hand for a shape the API
 * answers (the rulebook's receipt in spec/, which imports nothing of src/; the store's request view;
 * the gateway's evaluation and governance block; the receipt keys) are held equal to the schema that
 * serves /openapi.json (src/domain/wire/, src/http/schemas.ts). These are compile-time checks:
 * `npm run typecheck` fails when one side changes without the other (the `it`s only name them).
 * The services issue 39 (item 3) rebuilt return the schemas' own Types (KeyRegistry, Projects), and
 * the dashboard imports them (test/dashboard/wireTypes.test.ts).
 */
import { describe, expectTypeOf, it } from "vitest"
import type { Receipt as SpecReceipt, UnsignedReceipt } from "../../spec/receipt.ts"
import type * as A from "../../src/domain/wire/admin.ts"
import type * as R from "../../src/domain/wire/records.ts"
import type * as S from "../../src/http/schemas.ts"
import type { Evaluation, Governance } from "../../src/services/Gateway.ts"
import type { KeyInfo, IssuedKey, RotatedKey } from "../../src/services/KeyRegistry.ts"
import type { NewProject, Project, ProjectPatch } from "../../src/services/Projects.ts"
import type { PublicReceiptKey } from "../../src/services/ReceiptSigner.ts"
import type { ChainLink } from "../../src/store/activityRepo.ts"
import type { Attempt, requestView, Verification } from "../../src/store/requestStatements.ts"

describe("hand-written types of wire shapes equal their schemas (checked by tsc)", () => {
  it("the rulebook's receipt (spec/receipt.ts) is the Receipt schema", () => {
    expectTypeOf<SpecReceipt>().toEqualTypeOf<typeof R.Receipt.Type>()
    expectTypeOf<UnsignedReceipt>().toEqualTypeOf<Omit<typeof R.Receipt.Type, "hash" | "signature">>()
  })

  it("the store's request view, verification and attempt are RequestStatus's", () => {
    // A mutable object literal: every field of the schema, of its type, and no other.
    expectTypeOf<ReturnType<typeof requestView>>().toMatchTypeOf<typeof R.RequestStatus.Type>()
    expectTypeOf<keyof ReturnType<typeof requestView>>().toEqualTypeOf<keyof typeof R.RequestStatus.Type>()
    expectTypeOf<Verification>().toEqualTypeOf<typeof R.Verification.Type>()
    expectTypeOf<Attempt>().toEqualTypeOf<typeof R.Attempt.Type>()
  })

  it("the gateway's evaluation and governance block, the receipt keys and chain links", () => {
    expectTypeOf<Evaluation>().toEqualTypeOf<typeof S.Evaluation.Type>()
    expectTypeOf<Governance>().toEqualTypeOf<typeof S.Governance.Type>()
    expectTypeOf<PublicReceiptKey>().toEqualTypeOf<(typeof R.ReceiptKeys.Type)["data"][number]>()
    expectTypeOf<ChainLink>().toEqualTypeOf<NonNullable<(typeof A.ReceiptView.Type)["next"]>>()
  })

  it("the services' own answers are the schemas' Types", () => {
    expectTypeOf<KeyInfo>().toEqualTypeOf<typeof A.KeyInfo.Type>()
    expectTypeOf<IssuedKey>().toEqualTypeOf<typeof A.IssuedKey.Type>()
    expectTypeOf<RotatedKey>().toEqualTypeOf<typeof A.RotatedKey.Type>()
    expectTypeOf<Project>().toEqualTypeOf<typeof A.ProjectRecord.Type>()
    expectTypeOf<NewProject>().toEqualTypeOf<typeof A.NewProject.Type>()
    expectTypeOf<ProjectPatch>().toEqualTypeOf<typeof A.ProjectPatch.Type>()
  })
})
