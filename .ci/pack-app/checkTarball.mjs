// Checks an unpacked tarball of the package (its `package/` folder): every entry point and its
// declarations are there, and every source map names sources that are in the tarball.
import * as Fs from "node:fs"
import * as Path from "node:path"

const root = process.argv[2]
const problems = []
const manifest = JSON.parse(Fs.readFileSync(Path.join(root, "package.json"), "utf8"))
for (const [entry, targets] of Object.entries(manifest.exports)) {
  for (const target of Object.values(targets)) {
    if (!Fs.existsSync(Path.join(root, target))) problems.push(`exports["${entry}"]: ${target} is not in the tarball`)
  }
}
const files = Fs.readdirSync(root, { recursive: true, encoding: "utf8" })
const maps = files.filter((file) => file.endsWith(".map"))
for (const map of maps) {
  const { sources } = JSON.parse(Fs.readFileSync(Path.join(root, map), "utf8"))
  for (const source of sources) {
    if (!Fs.existsSync(Path.resolve(Path.dirname(Path.join(root, map)), source))) problems.push(`${map}: source ${source} is not in the tarball`)
  }
}
if (maps.length === 0) problems.push("no source maps in the tarball")
for (const problem of problems) console.error(`pack-check: ${problem}`)
if (problems.length > 0) process.exit(1)
console.log(`pack-check: tarball has ${files.length} files, ${maps.length} source maps resolving inside it`)
