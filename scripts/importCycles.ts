/**
 * Fails when modules import each other in a circle, counting type-only imports: a circle of types
 * still ties the modules' declarations together, and the next value import along it makes it a
 * circle at load time. Run by `npm run lint` over `src/`, or over the folders given as arguments.
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import ts from "typescript"

const repository = Path.resolve(import.meta.dirname, "..")
const folders = process.argv.length > 2 ? process.argv.slice(2) : ["src"]

const modulesUnder = (folder: string): Array<string> =>
  Fs.readdirSync(Path.join(repository, folder), { recursive: true, encoding: "utf8" })
    .filter((file) => file.endsWith(".ts") && !file.endsWith(".d.ts"))
    .map((file) => Path.join(repository, folder, file))

/** The modules of the repository a module imports (relative specifiers; `.js` names its `.ts`). */
const importsOf = (module: string): Array<string> =>
  ts.preProcessFile(Fs.readFileSync(module, "utf8"), true, true).importedFiles
    .map((imported) => imported.fileName)
    .filter((specifier) => specifier.startsWith("."))
    .map((specifier) => Path.resolve(Path.dirname(module), specifier.replace(/\.js$/, ".ts")))
    .filter((target) => Fs.existsSync(target))

/** Tarjan's strongly connected components: every component of more than one module is a circle. */
const circles = (graph: ReadonlyMap<string, ReadonlyArray<string>>): Array<Array<string>> => {
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: Array<string> = []
  const onStack = new Set<string>()
  const found: Array<Array<string>> = []
  const visit = (module: string) => {
    index.set(module, index.size)
    low.set(module, index.get(module)!)
    stack.push(module)
    onStack.add(module)
    for (const target of graph.get(module) ?? []) {
      if (!index.has(target)) {
        visit(target)
        low.set(module, Math.min(low.get(module)!, low.get(target)!))
      } else if (onStack.has(target)) {
        low.set(module, Math.min(low.get(module)!, index.get(target)!))
      }
    }
    if (low.get(module) !== index.get(module)) return
    const component: Array<string> = []
    let member: string
    do {
      member = stack.pop()!
      onStack.delete(member)
      component.push(member)
    } while (member !== module)
    if (component.length > 1 || (graph.get(module) ?? []).includes(module)) found.push(component)
  }
  for (const module of graph.keys()) if (!index.has(module)) visit(module)
  return found
}

/** One circle through the component's first module, as a path back to where it starts. */
const pathThrough = (component: ReadonlyArray<string>, graph: ReadonlyMap<string, ReadonlyArray<string>>) => {
  const inside = new Set(component)
  const start = component[0]
  const cameFrom = new Map<string, string>()
  const queue = [start]
  while (queue.length > 0) {
    const module = queue.shift()!
    for (const target of graph.get(module) ?? []) {
      if (target === start) {
        const path = [module]
        while (path[0] !== start) path.unshift(cameFrom.get(path[0])!)
        return [...path, start]
      }
      if (inside.has(target) && !cameFrom.has(target)) {
        cameFrom.set(target, module)
        queue.push(target)
      }
    }
  }
  return [...component, start]
}

const graph = new Map(folders.flatMap(modulesUnder).map((module) => [module, importsOf(module)]))
const found = circles(graph)
for (const component of found) {
  const path = pathThrough(component, graph).map((module) => Path.relative(repository, module))
  console.error(`import circle (${component.length} modules): ${path.join(" -> ")}`)
}
if (found.length > 0) process.exit(1)
