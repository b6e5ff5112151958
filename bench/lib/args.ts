/** Tiny argv helpers shared by the bench entry points (`--name value` and `--flag`). */
export const args = process.argv.slice(2)

export const arg = (name: string): string | undefined => {
  const eq = args.find((a) => a.startsWith(`${name}=`))
  if (eq !== undefined) return eq.slice(name.length + 1)
  const i = args.indexOf(name)
  return i === -1 ? undefined : args[i + 1]
}

export const flag = (name: string): boolean => args.includes(name)

export const numArg = (name: string, fallback: number): number => {
  const v = arg(name)
  if (v === undefined) return fallback
  const n = Number(v)
  if (!Number.isFinite(n)) throw new Error(`${name} expects a number, got ${v}`)
  return n
}
