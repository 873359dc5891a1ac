/**
 * Runs one case (argv[2]) and prints its row as one JSON line for the parent.
 */
import { cases } from "./cases.js"

const id = process.argv[2]
const run = cases[id]
if (run === undefined) {
  console.error(`unknown bench case ${id}`)
  process.exit(2)
}
run().then(
  (row) => {
    console.log(`ROW ${JSON.stringify(row)}`)
    process.exit(0)
  },
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
