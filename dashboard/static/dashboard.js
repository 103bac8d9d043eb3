// The kohort dashboard: draws the view the server sends on the event stream /events: the whole
// view first (event "snapshot"), then what changed (event "patch"), merged into the view held
// here. No framework, no build step: strings of HTML, escaped.
"use strict";

const esc = (text) =>
  String(text ?? "").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

// Amounts: GPUs and cores as numbers, bytes in Gi.
function fmt(value, resource) {
  if (value === null || value === undefined) return "∞";
  if (resource === "memory" || resource.endsWith("storage")) {
    return `${+(value / 2 ** 30).toFixed(1)}Gi`;
  }
  return `${+value.toFixed(2)}`;
}

function since(seconds) {
  return seconds ? new Date(seconds * 1000).toLocaleString() : "";
}

function ago(seconds, now) {
  if (!seconds) return "";
  const s = Math.max(0, Math.round(now - seconds));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.round(s / 60)}m`;
  return `${Math.round(s / 3600)}h`;
}

// Usage against nominal quota, what is borrowed above it, and the borrowing limit, on one bar
// scaled to nominal + limit (or usage when larger).
function bar(line) {
  const top = Math.max(line.nominal + (line.borrowing_limit ?? line.nominal), line.usage, 1e-9);
  const pct = (v) => `${Math.min(100, (100 * v) / top)}%`;
  const own = Math.min(line.usage, line.nominal);
  const over = Math.max(0, line.usage - line.nominal);
  let html = `<span class="bar"><span class="used" style="width:${pct(own)}"></span>`;
  if (over > 0) html += `<span class="over" style="left:${pct(own)};width:${pct(over)}"></span>`;
  html += `<span class="limit" title="nominal" style="left:${pct(line.nominal)}"></span>`;
  if (line.borrowing_limit !== null) {
    html += `<span class="limit" title="borrowing limit" style="left:${pct(line.nominal + line.borrowing_limit)}"></span>`;
  }
  return html + "</span>";
}

function queueHtml(q) {
  const rows = q.resources
    .map(
      (l) => `<tr data-flavor="${esc(l.flavor)}" data-resource="${esc(l.resource)}">
        <td>${esc(l.flavor)}</td><td>${esc(l.resource)}</td>
        <td class="num usage">${fmt(l.usage, l.resource)}</td>
        <td class="num nominal">${fmt(l.nominal, l.resource)}</td>
        <td class="num borrowing-limit">${l.borrowing_limit === null ? "none" : fmt(l.borrowing_limit, l.resource)}</td>
        <td class="num borrowed">${fmt(l.borrowed, l.resource)}</td>
        <td class="num lendable">${fmt(l.lendable, l.resource)}</td>
        <td>${bar(l)}</td></tr>`,
    )
    .join("");
  const gangs = q.pending_gangs
    .map(
      (g) => `<li data-gang="${esc(g.namespace)}/${esc(g.name)}">
        ${g.position !== null ? `<b>#${g.position}</b> ` : ""}${esc(g.namespace)}/${esc(g.name)}
        (${g.pods} pods, ${fmt(g.gpus, "gpu")} GPUs, priority ${g.priority}, waiting since ${since(g.waiting_since)})
        ${g.forecast ? `<span class="forecast">expected ${esc(g.forecast)}</span>` : ""}
        <span class="reason">${esc(g.reason)}</span></li>`,
    )
    .join("");
  const more = q.pending > q.pending_gangs.length
    ? `<div class="more">and ${q.pending - q.pending_gangs.length} more</div>` : "";
  return `<div class="queue" id="queue-${esc(q.name)}" data-queue="${esc(q.name)}">
    <span class="name">${esc(q.name)}</span>
    <span class="counts"><span class="admitted">${q.admitted}</span> admitted,
      <span class="pending-count">${q.pending}</span> pending;
      LocalQueues: ${esc(q.local_queues.join(", ") || "none")}</span>
    ${q.inactive_reason ? `<div class="inactive">inactive: ${esc(q.inactive_reason)}</div>` : ""}
    <table><thead><tr><th>flavor</th><th>resource</th><th class="num">usage</th>
      <th class="num">nominal</th><th class="num">borrowing limit</th><th class="num">borrowed</th>
      <th class="num">lendable</th><th></th></tr></thead><tbody>${rows}</tbody></table>
    ${gangs ? `<ol class="pending">${gangs}</ol>` : ""}${more}</div>`;
}

function cohortHead(c) {
  const lent = Object.entries(c.borrowed_by_queues)
    .map(([r, v]) => `${fmt(v, r)} ${esc(r)}`).join(", ");
  const lines = c.resources
    .map((l) => `${esc(l.flavor)}/${esc(l.resource)}: ${fmt(l.usage, l.resource)} of ${fmt(l.subtree_quota, l.resource)}` +
      (l.borrowed ? `, ${fmt(l.borrowed, l.resource)} from its parent` : ""))
    .join("; ");
  return `<div class="head" id="cohort-head-${esc(c.name)}"><div class="name">cohort ${esc(c.name)}</div>
    ${lines ? `<div class="subtree">${lines}</div>` : ""}
    ${lent ? `<div class="lent">lent between its queues: ${lent}</div>` : ""}</div>`;
}

function cohortHtml(view, name) {
  const c = view.cohorts[name];
  return `<div class="cohort" id="cohort-${esc(name)}">${cohortHead(c)}
    ${c.cohorts.map((child) => cohortHtml(view, child)).join("")}
    ${c.queues.map((q) => queueHtml(view.queues[q])).join("")}</div>`;
}

// The tree is redrawn whole only when its shape changes (a queue or cohort added, removed or
// moved); otherwise only the cohort headings whose text changed and the queues whose version
// changed are replaced, so that a change in one of 1,000 queues costs one queue's redraw.
let shape = "";
const drawn = new Map();
// queue name -> the version of its part last drawn (the server bumps it when the part changes).
const drawnVersions = new Map();

function drawTree(view) {
  const now = JSON.stringify([view.roots, view.lone_queues,
    Object.values(view.cohorts).map((c) => [c.name, c.cohorts, c.queues])]);
  const versions = view.queue_versions || {};
  if (now !== shape) {
    document.getElementById("tree").innerHTML =
      "<h2>Cohorts and queues</h2>" +
      view.roots.map((name) => cohortHtml(view, name)).join("") +
      view.lone_queues.map((q) => queueHtml(view.queues[q])).join("");
    shape = now;
    drawn.clear();
    drawnVersions.clear();
    for (const c of Object.values(view.cohorts)) drawn.set(`cohort-head-${c.name}`, cohortHead(c));
    for (const [name, version] of Object.entries(versions)) drawnVersions.set(name, version);
    return;
  }
  const replace = (id, html) => {
    if (drawn.get(id) === html) return;
    const element = document.getElementById(id);
    if (element) element.outerHTML = html;
    drawn.set(id, html);
  };
  for (const c of Object.values(view.cohorts)) replace(`cohort-head-${c.name}`, cohortHead(c));
  for (const q of Object.values(view.queues)) {
    const version = versions[q.name];
    if (version !== undefined && drawnVersions.get(q.name) === version) continue;
    const element = document.getElementById(`queue-${q.name}`);
    if (element) element.outerHTML = queueHtml(q);
    drawnVersions.set(q.name, version);
  }
}

function chart(history, now) {
  const svg = document.getElementById("gpu-chart");
  if (history.length === 0) { svg.innerHTML = ""; return; }
  const t0 = history[0].at;
  const span = Math.max(now.at - t0, 1);
  const top = Math.max(...history.map((s) => s.allocated + s.held + s.idle), 1);
  const x = (t) => ((t - t0) / span) * 600;
  const y = (v) => 120 - (v / top) * 115;
  const points = [...history, now];
  const band = (lo, hi, cls) => {
    const upper = points.map((s) => `${x(s.at)},${y(hi(s))}`);
    const lower = points.slice().reverse().map((s) => `${x(s.at)},${y(lo(s))}`);
    return `<polygon class="${cls}" fill="var(--${cls})" points="${upper.concat(lower).join(" ")}"/>`;
  };
  svg.innerHTML =
    band(() => 0, (s) => s.allocated, "allocated") +
    band((s) => s.allocated, (s) => s.allocated + s.held, "held") +
    band((s) => s.allocated + s.held, (s) => s.allocated + s.held + s.idle, "idle");
}

function draw(view) {
  const now = view.at;
  const g = view.gpus;
  document.getElementById("gpu-now").innerHTML =
    `<span>allocated <b id="gpus-allocated">${fmt(g.allocated, "gpu")}</b></span>` +
    `<span>held by gangs not fully placed <b id="gpus-held">${fmt(g.held, "gpu")}</b></span>` +
    `<span>idle <b id="gpus-idle">${fmt(g.idle, "gpu")}</b></span>`;
  chart(view.gpu_history, g);
  document.getElementById("eviction-rows").innerHTML = view.evictions
    .map((e) => `<tr><td>${ago(e.at, now)} ago</td><td>${esc(e.namespace)}/${esc(e.name)}</td>
      <td>${esc(e.cluster_queue)}</td><td>${esc(e.kind)}</td>
      <td title="${esc(e.message)}">${esc(e.cause)}</td><td class="num">${fmt(e.gpus, "gpu")}</td>
      <td class="num">${Math.round(e.gpu_seconds)}</td></tr>`)
    .join("");
  drawTree(view);
  document.getElementById("updated").textContent =
    `as of ${new Date(now * 1000).toLocaleTimeString()}`;
  document.body.dataset.version = String((+document.body.dataset.version || 0) + 1);
}

// Merges a patch into the view: the figures of the moment, the parts that changed (by name),
// those removed, and the GPU samples and evictions recorded since (with how many to keep).
function merge(view, patch) {
  view.version = patch.version;
  view.at = patch.at;
  view.gpus = patch.gpus;
  if (patch.roots) view.roots = patch.roots;
  if (patch.lone_queues) view.lone_queues = patch.lone_queues;
  Object.assign(view.cohorts, patch.cohorts);
  for (const name of patch.cohorts_removed) delete view.cohorts[name];
  Object.assign(view.queues, patch.queues);
  Object.assign(view.queue_versions, patch.queue_versions);
  for (const name of patch.queues_removed) {
    delete view.queues[name];
    delete view.queue_versions[name];
  }
  const history = view.gpu_history.concat(patch.gpu_history_added);
  view.gpu_history = history.slice(Math.max(0, history.length - patch.gpu_history_kept));
  view.evictions = patch.evictions_added.concat(view.evictions).slice(0, patch.evictions_kept);
}

let view = null;

function connect() {
  const status = document.getElementById("status");
  const events = new EventSource("/events");
  events.onopen = () => { status.textContent = "live"; status.className = "status live"; };
  events.addEventListener("snapshot", (message) => {
    view = JSON.parse(message.data);
    draw(view);
  });
  events.addEventListener("patch", (message) => {
    const patch = JSON.parse(message.data);
    if (view === null || patch.base !== view.version) {
      // Not made for what this page holds: start again from a snapshot.
      events.close();
      view = null;
      connect();
      return;
    }
    merge(view, patch);
    draw(view);
  });
  // EventSource reconnects by itself (and the server starts again with a snapshot); say so.
  events.onerror = () => { status.textContent = "reconnecting…"; status.className = "status lost"; };
}

connect();
