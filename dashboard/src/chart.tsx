/**
 * Usage per day as uPlot charts (one series per model), with the same figures in a table for
 * screen readers and for anyone who wants the numbers. uPlot draws on canvas and styles through the
 * CSSOM, which the dashboard's CSP (no inline styles) allows.
 */
import { useEffect, useRef } from "preact/hooks"
import uPlot from "uplot"
import "uplot/dist/uPlot.min.css"
import type { Usage } from "./api.ts"
import { credits } from "./ui.tsx"

// Colour-blind-safe (Okabe–Ito) colours, dark enough on white.
const COLOURS = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"]

/** Every day of the month (UTC), and per model the figure of each day (0 when none). */
export const byDay = (usage: Usage, field: "credits" | "requests") => {
  const [y, m] = usage.period.split("-").map(Number) as [number, number]
  const days = new Date(Date.UTC(y, m, 0)).getUTCDate()
  const dates = Array.from({ length: days }, (_, i) => `${usage.period}-${String(i + 1).padStart(2, "0")}`)
  const models = [...new Set(usage.days.map((d) => d.model))].sort()
  const series = models.map((model) => dates.map((date) => usage.days.find((d) => d.date === date && d.model === model)?.[field] ?? 0))
  return { dates, models, series, x: dates.map((d) => Date.parse(`${d}T00:00:00Z`) / 1000) }
}

export const UsageChart = ({ usage, field, title }: { usage: Usage; field: "credits" | "requests"; title: string }) => {
  const box = useRef<HTMLDivElement>(null)
  const { models, series, x, dates } = byDay(usage, field)
  useEffect(() => {
    const el = box.current
    if (el === null) return
    const width = () => Math.max(260, el.clientWidth)
    // Stacked bars: model k is drawn as the sum of models 0..k, the tallest sum first so each model's
    // own share shows on top of the one below; the legend and the table show each model's own figure.
    const stacked = series.map((_, k) => x.map((_, i) => series.slice(0, k + 1).reduce((n, s) => n + (s[i] ?? 0), 0)))
    const order = models.map((_, k) => k).reverse()
    const plot = new uPlot(
      {
        width: width(),
        height: 220,
        tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"),
        legend: { show: models.length > 0 },
        cursor: { drag: { x: false, y: false }, points: { show: false } },
        scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
        axes: [{ stroke: "#333" }, { stroke: "#333", size: 60, values: (_u, ticks) => ticks.map((t) => credits(t)) }],
        series: [
          { label: "Day (UTC)" },
          ...order.map((k) => ({
            label: models[k]!,
            stroke: COLOURS[k % COLOURS.length]!,
            fill: COLOURS[k % COLOURS.length]!,
            width: 1,
            points: { show: false },
            value: (_u: uPlot, _v: number | null, _s: number, idx: number | null) => (idx === null ? "–" : credits(series[k]![idx] ?? 0)),
            paths: uPlot.paths.bars!({ size: [0.7, 40], align: 0 })
          }))
        ]
      },
      [x, ...order.map((k) => stacked[k]!)],
      el
    )
    const resize = new ResizeObserver(() => plot.setSize({ width: width(), height: 220 }))
    resize.observe(el)
    return () => {
      resize.disconnect()
      plot.destroy()
    }
  }, [usage, field])
  const totals = series.map((s) => s.reduce((a, b) => a + b, 0))
  return (
    <figure class="chart" data-chart={field}>
      <figcaption>{title}</figcaption>
      <div ref={box} class="chart-canvas" aria-hidden="true" />
      <details>
        <summary>{title} as a table</summary>
        <table class="compact" data-table={field}>
          <thead>
            <tr><th scope="col">Day</th>{models.map((m) => <th scope="col">{m}</th>)}</tr>
          </thead>
          <tbody>
            {dates.map((d, i) => series.some((s) => (s[i] ?? 0) > 0) ? (
              <tr><th scope="row">{d}</th>{series.map((s) => <td>{credits(s[i] ?? 0)}</td>)}</tr>
            ) : null)}
          </tbody>
          <tfoot>
            <tr><th scope="row">Total</th>{totals.map((t) => <td data-total={field}>{credits(t)}</td>)}</tr>
          </tfoot>
        </table>
      </details>
    </figure>
  )
}
