/**
 * Read another tenant's request and receipt by id: the answer is byte-for-byte what an unknown id
 * gets (after substituting the id), so a tenant cannot even learn that the id exists.
 */
import { expect } from "vitest"
import { checkInvariants, get, type GatewayCommand, type GatewayModel, type GatewayReal } from "./model.ts"

export class CrossTenantReadCommand implements GatewayCommand {
  constructor(readonly reader: number, readonly pick: number) {}
  check = (m: Readonly<GatewayModel>) => m.charges[1 - this.reader]!.size > 0
  async run(m: GatewayModel, r: GatewayReal): Promise<void> {
    const ids = [...m.charges[1 - this.reader]!.keys()]
    const id = ids[this.pick % ids.length]!
    // An id of the same shape that nobody issued.
    const unknown = `req_${"z".repeat(id.length - 4)}`
    for (const suffix of ["", "/receipt"]) {
      const foreign = await get(r, this.reader, `/requests/${id}${suffix}`)
      const none = await get(r, this.reader, `/requests/${unknown}${suffix}`)
      expect(foreign.status).toBe(404)
      expect(foreign.bytes.split(id).join("<id>")).toBe(none.bytes.split(unknown).join("<id>"))
      // The owner still sees it.
      expect((await get(r, 1 - this.reader, `/requests/${id}${suffix}`)).status).toBe(200)
    }
    r.coverage.hit("CrossTenantRead")
    await checkInvariants(m, r)
  }
  toString = () => `CrossTenantRead(t${this.reader} reads t${1 - this.reader}#${this.pick})`
}
