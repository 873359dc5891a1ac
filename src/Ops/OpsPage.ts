/**
 * The operations page: one self-contained HTML document (no external assets) whose script polls
 * the JSON API every second and draws the system's flows (stats, rates, lag, degraded state),
 * work-pulling pools with each worker's in-flight jobs, and each durable queue's counts, waiting
 * entries and dead letters, with requeue and discard buttons when operator actions are enabled.
 * Every number sits in a cell tagged with what it is (`data-endpoint` / `data-field`, ...), so
 * scripts and tests can read the page as a person does.
 */

const style = `
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1d2330; background: #f7f8fa; }
h1 { font-size: 1.3rem; margin: 0 0 .2rem; } h2 { font-size: 1.05rem; margin: 1.6rem 0 .5rem; }
.meta { color: #5a6375; } .meta span { margin-right: 1.2rem; }
table { border-collapse: collapse; background: #fff; margin-bottom: .8rem; }
th, td { border: 1px solid #d9dde5; padding: .25rem .55rem; text-align: right; white-space: nowrap; }
th { background: #eef0f4; font-weight: 600; } td.name, th.name { text-align: left; }
.badge { display: inline-block; padding: 0 .45rem; border-radius: .6rem; font-size: .8rem; }
.live { background: #d7f2df; } .stopped { background: #f6d6d6; } .degraded { background: #fde7b8; }
button { font: inherit; padding: .1rem .6rem; margin-left: .3rem; cursor: pointer; }
button:disabled { cursor: not-allowed; } .empty { color: #8a92a3; } .error { color: #a11; }
code { font-size: .85rem; }
`

const script = `
const previous = new Map()
let refreshes = 0
let actions = false
const el = (tag, attributes = {}, ...children) => {
  const node = document.createElement(tag)
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "class") node.className = value
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value)
    else if (value !== undefined && value !== false) node.setAttribute(key, value === true ? "" : String(value))
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)))
  return node
}
const shown = (value) => typeof value === "number" ? (Number.isInteger(value) ? String(value) : value.toFixed(1)) : String(value)
const statsColumns = (endpoints) => {
  const columns = []
  for (const endpoint of endpoints) for (const [key, value] of Object.entries(endpoint.stats)) {
    if (typeof value === "number" && !columns.includes(key)) columns.push(key)
  }
  return columns
}
const rate = (endpoint, field, at) => {
  const before = previous.get(endpoint.name)
  if (before === undefined || at <= before.at || typeof before.stats[field] !== "number") return "–"
  return ((endpoint.stats[field] - before.stats[field]) * 1000 / (at - before.at)).toFixed(1)
}
const state = (endpoint) => el("span", {},
  el("span", { class: "badge " + (endpoint.live ? "live" : "stopped"), "data-endpoint": endpoint.name, "data-field": "live" }, endpoint.live ? "live" : "stopped"),
  endpoint.stats.degraded ? el("span", { class: "badge degraded", "data-endpoint": endpoint.name, "data-field": "degraded" }, "degraded") : "")
const flowTable = (endpoints, peerTitle, rateFields, at, extra = []) => {
  if (endpoints.length === 0) return el("p", { class: "empty" }, "none")
  const columns = statsColumns(endpoints)
  const head = el("tr", {}, el("th", { class: "name" }, "endpoint"), el("th", { class: "name" }, peerTitle), el("th", { class: "name" }, "state"),
    ...extra.map((field) => el("th", {}, field)), ...columns.map((field) => el("th", {}, field)), ...rateFields.map((field) => el("th", {}, field + "/s")))
  const rows = endpoints.map((endpoint) => el("tr", { "data-endpoint-row": endpoint.name },
    el("td", { class: "name" }, endpoint.name, endpoint.durable ? " (durable)" : ""), el("td", { class: "name" }, endpoint.peer ?? "–"), el("td", { class: "name" }, state(endpoint)),
    ...extra.map((field) => el("td", { "data-endpoint": endpoint.name, "data-field": field }, shown(endpoint[field]))),
    ...columns.map((field) => el("td", { "data-endpoint": endpoint.name, "data-field": field }, endpoint.stats[field] === undefined ? "–" : shown(endpoint.stats[field]))),
    ...rateFields.map((field) => el("td", { "data-endpoint": endpoint.name, "data-rate": field }, rate(endpoint, field, at)))))
  return el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows))
}
const poolSection = (producer) => {
  const pool = producer.pool
  if (pool === undefined || pool === null) return el("p", { class: "empty" }, producer.name + ": stopped")
  const fields = Object.keys(pool).filter((key) => typeof pool[key] === "number")
  const summary = el("table", {}, el("tr", {}, el("th", { class: "name" }, "pool"), ...fields.map((field) => el("th", {}, field))),
    el("tr", {}, el("td", { class: "name" }, producer.name), ...fields.map((field) => el("td", { "data-pool": producer.name, "data-field": field }, shown(pool[field])))))
  const workers = pool.perWorker.length === 0 ? el("p", { class: "empty" }, "no worker bound") : el("table", {},
    el("tr", {}, el("th", { class: "name" }, "worker"), el("th", {}, "inFlight"), el("th", {}, "freeDemand"), el("th", {}, "dispatched")),
    ...pool.perWorker.map((worker) => el("tr", {}, el("td", { class: "name" }, worker.worker),
      ...["inFlight", "freeDemand", "dispatched"].map((field) => el("td", { "data-pool": producer.name, "data-worker": worker.worker, "data-field": field }, shown(worker[field]))))))
  return el("div", {}, summary, workers)
}
const act = async (endpoint, messageId, action) => {
  const response = await fetch("api/queues/" + encodeURIComponent(endpoint) + "/dead-letters/" + encodeURIComponent(messageId) + "/" + action, { method: "POST" })
  document.getElementById("last-action").textContent = action + " " + messageId + ": " + (response.ok ? (await response.json()).done : response.status)
  await refresh()
}
const queueSection = (queue) => {
  const counts = el("table", {}, el("tr", {}, el("th", { class: "name" }, "queue"), ...Object.keys(queue.counts).map((field) => el("th", {}, field)), el("th", {}, "oldest age (ms)")),
    el("tr", {}, el("td", { class: "name" }, queue.endpoint), ...Object.entries(queue.counts).map(([field, value]) => el("td", { "data-queue": queue.endpoint, "data-field": field }, shown(value))),
      el("td", { "data-queue": queue.endpoint, "data-field": "oldestAgeMillis" }, queue.oldestAgeMillis === null ? "–" : shown(queue.oldestAgeMillis))))
  const entries = queue.entries.length === 0 ? el("p", { class: "empty" }, "nothing waiting") : el("table", {},
    el("tr", {}, el("th", { class: "name" }, "messageId"), el("th", {}, "seq"), el("th", { class: "name" }, "state"), el("th", {}, "attempts"), el("th", { class: "name" }, "payload")),
    ...queue.entries.map((entry) => el("tr", { "data-entry": entry.messageId }, el("td", { class: "name" }, entry.messageId), el("td", {}, entry.seq ?? "–"),
      el("td", { class: "name" }, entry.state), el("td", {}, entry.attempts), el("td", { class: "name" }, el("code", {}, JSON.stringify(entry.payload))))))
  const dead = queue.deadLetters.length === 0 ? el("p", { class: "empty" }, "no dead letters") : el("table", {},
    el("tr", {}, el("th", { class: "name" }, "dead letter"), el("th", {}, "attempts"), el("th", { class: "name" }, "last error"), el("th", { class: "name" }, "payload"), el("th", {}, "")),
    ...queue.deadLetters.map((letter) => el("tr", { "data-dead-letter": letter.messageId }, el("td", { class: "name" }, letter.messageId), el("td", {}, letter.attempts),
      el("td", { class: "name" }, letter.lastError), el("td", { class: "name" }, el("code", {}, JSON.stringify(letter.payload))),
      el("td", {}, ...["requeue", "discard"].map((action) => el("button", {
        "data-action": action, "data-message-id": letter.messageId, disabled: !actions, title: actions ? "" : "read-only: operator actions are not enabled",
        onclick: () => act(queue.endpoint, letter.messageId, action)
      }, action))))))
  return el("div", {}, counts, entries, dead)
}
const refresh = async () => {
  try {
    const snapshot = await (await fetch("api/snapshot")).json()
    actions = snapshot.actions
    const at = snapshot.at
    const of = (...kinds) => snapshot.endpoints.filter((endpoint) => kinds.includes(endpoint.kind))
    const durable = snapshot.endpoints.filter((endpoint) => endpoint.durable)
    const queues = await Promise.all(durable.map(async (endpoint) => (await fetch("api/queues/" + encodeURIComponent(endpoint.name))).json()))
    document.getElementById("node").textContent = snapshot.node
    document.getElementById("mode").textContent = actions ? "operator actions enabled" : "read-only"
    document.getElementById("producers").replaceChildren(flowTable(of("Producer", "WorkProducer"), "consumer", ["sent", "confirmed"], at))
    document.getElementById("consumers").replaceChildren(flowTable(of("Consumer", "Worker"), "producer", ["delivered"], at, ["window"]))
    document.getElementById("pools").replaceChildren(...(of("WorkProducer").length === 0 ? [el("p", { class: "empty" }, "none")] : of("WorkProducer").map(poolSection)))
    document.getElementById("queues").replaceChildren(...(queues.length === 0 ? [el("p", { class: "empty" }, "no durable queue")] : queues.map(queueSection)))
    for (const endpoint of snapshot.endpoints) previous.set(endpoint.name, { at, stats: endpoint.stats })
    const updated = document.getElementById("updated")
    updated.textContent = new Date(at).toISOString()
    updated.dataset.at = String(at)
    updated.dataset.refreshes = String(++refreshes)
    document.getElementById("problem").textContent = ""
  } catch (error) {
    document.getElementById("problem").textContent = "cannot read the API: " + error
  }
}
refresh()
setInterval(refresh, 1000)
`

/** The page, served at `/`. */
export const page = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>effect-reliable operations</title>
<style>${style}</style>
</head>
<body>
<h1>effect-reliable operations</h1>
<div class="meta"><span>node <b id="node">…</b></span><span id="mode"></span><span>updated <span id="updated" data-refreshes="0">…</span></span>
<span id="last-action"></span><span id="problem" class="error"></span></div>
<h2>Producers</h2><div id="producers"></div>
<h2>Consumers and workers</h2><div id="consumers"></div>
<h2>Work-pulling pools</h2><div id="pools"></div>
<h2>Durable queues</h2><div id="queues"></div>
<script>${script}</script>
</body>
</html>
`
