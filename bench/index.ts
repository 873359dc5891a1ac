/**
 * `npm run bench`: runs every case (or those named on the command line) in a child process and
 * prints one table, with each rate as a ratio to the baseline measured in the same run.
 */
import { spawnSync } from "node:child_process"
import { fileURLToPath } from "node:url"
import { cases } from "./cases.js"
import type { Row } from "./Row.js"

const child = fileURLToPath(new URL("./child.js", import.meta.url))
const wanted = process.argv.slice(2)
const ids = ["baseline", ...Object.keys(cases).filter((id) => id !== "baseline" && (wanted.length === 0 || wanted.some((w) => id.includes(w))))]

const rows: Array<Row & { readonly id: string }> = []
for (const id of ids) {
  const result = spawnSync(process.execPath, ["--expose-gc", child, id], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], timeout: 30 * 60_000 })
  const line = (result.stdout ?? "").split("\n").find((text) => text.startsWith("ROW "))
  if (result.status !== 0 || line === undefined) {
    console.error(`bench case ${id} failed (exit ${result.status})`)
    continue
  }
  rows.push({ id, ...(JSON.parse(line.slice(4)) as Row) })
  process.stderr.write(`  done: ${id}\n`)
}

const baseline = rows.find((row) => row.id === "baseline")
const format = (value: number, digits = 0) => value.toLocaleString("en", { maximumFractionDigits: digits, minimumFractionDigits: digits })
const header = ["case", "units", "seconds", "rate", "vs baseline", "peak RSS MiB", "heap after GC MiB", "note"]
const table = rows.map((row) => [
  row.name,
  format(row.messages),
  format(row.seconds, 2),
  `${format(row.rate)} ${row.unit}`,
  baseline === undefined || row.unit !== baseline.unit ? "" : format(row.rate / baseline.rate, 2),
  format(row.peakRssMiB, 0),
  row.heapAfterGcMiB === undefined ? "" : format(row.heapAfterGcMiB, 1),
  row.note ?? ""
])
const widths = header.map((title, column) => Math.max(title.length, ...table.map((cells) => cells[column].length)))
const line = (cells: ReadonlyArray<string>) => `| ${cells.map((cell, column) => cell.padEnd(widths[column])).join(" | ")} |`
console.log(line(header))
console.log(`|${widths.map((width) => "-".repeat(width + 2)).join("|")}|`)
for (const cells of table) console.log(line(cells))
