/**
 * A request URL's path: everything before the first `?`. No imports, so any module of src/http
 * (errors.ts, request.ts, the fast path) can use it without a cycle; no array is allocated.
 */
export const pathOf = (url: string): string => {
  const q = url.indexOf("?")
  return q === -1 ? url : url.slice(0, q)
}
