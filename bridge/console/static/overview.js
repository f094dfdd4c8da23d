// Routes (back kind, health, commands, prompt sources) and small live charts per route,
// computed from the daemon's own `/metrics` (Prometheus text format 0.0.4), polled.

import { metricsText, tokens } from "./api.js";
import { announce, h, svg } from "./dom.js";
import { routesOf } from "./sessions.js";

const POLL_MS = 5000;
const KEEP = 60; // samples per route: five minutes
const P = "agent_bridge_";
const CHARTS = [
  { key: "tpm", label: "Turns per minute", unit: "" },
  { key: "ttfe", label: "Time to first event", unit: " ms" },
  { key: "errors", label: "Errors", unit: "" },
];

/** [{name, labels: {..}, value}] of a Prometheus text exposition. */
export function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2].replace(/\\(.)/g, "$1");
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

function sample(metrics) {
  const by = new Map(); // route → {turns, errors, fsum, fcount}
  const get = (route) => by.get(route) || by.set(route, { turns: 0, errors: 0, fsum: 0, fcount: 0 }).get(route);
  for (const { name, labels, value } of metrics) {
    if (!labels.route) continue;
    const s = get(labels.route);
    if (name === `${P}turns_total`) {
      s.turns += value;
      if (labels.outcome === "failed") s.errors += value;
    } else if (name === `${P}back_errors_total`) s.errors += value;
    else if (name === `${P}turn_first_event_seconds_sum`) s.fsum += value;
    else if (name === `${P}turn_first_event_seconds_count`) s.fcount += value;
  }
  return by;
}

function chart(label, route, points, unit) {
  const w = 240;
  const hgt = 56;
  const values = points.filter((v) => v !== null);
  const max = Math.max(1, ...values);
  const step = w / Math.max(1, KEEP - 1);
  const offset = KEEP - points.length;
  const coords = points
    .map((v, i) => (v === null ? null : `${((offset + i) * step).toFixed(1)},${(hgt - 2 - (v / max) * (hgt - 6)).toFixed(1)}`))
    .filter(Boolean);
  const last = values.length ? values[values.length - 1] : null;
  const title = `${label} — ${route}: ${last === null ? "no data yet" : `${Math.round(last * 10) / 10}${unit}`}`;
  const graph = svg(
    "svg",
    { viewBox: `0 0 ${w} ${hgt}`, role: "img", "aria-label": title, class: "chart", preserveAspectRatio: "none" },
    svg("title", {}, title),
    svg("line", { x1: 0, y1: hgt - 1, x2: w, y2: hgt - 1, class: "axis" }),
    coords.length ? svg("polyline", { points: coords.join(" "), class: "series" }) : null,
  );
  return h(
    "figure.chart-box",
    { dataset: { metric: label, route } },
    h("figcaption", null, label, h("span.last", null, last === null ? "—" : `${Math.round(last * 10) / 10}${unit}`)),
    graph,
  );
}

export async function overviewView({ signal }) {
  const { routes, prompt_sources: sources = [] } = await routesOf(signal);
  const rows = routes.map((r) => {
    const health = r.health?.status || "not checked";
    return h(
      "tr",
      { dataset: { route: r.name, health } },
      h("th", { scope: "row" }, r.name, r.default ? h("span.tag", null, " default") : null),
      h("td", { "data-label": "Back" }, r.back ?? "—"),
      h("td", { "data-label": "Health" }, h("span.badge", { dataset: { health } }, health)),
      h("td", { "data-label": "Commands" }, String((r.commands || []).length)),
      h("td", { "data-label": "Description" }, r.description || ""),
    );
  });
  const routeTable = h(
    "div.table-wrap",
    null,
    h(
      "table",
      null,
      h("thead", null, h("tr", null, ...["Route", "Back", "Health", "Commands", "Description"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", null, rows),
    ),
  );
  const sourceList = sources.length
    ? h("ul.sources", { "aria-label": "Prompt sources" }, sources.map((s) => h("li", { dataset: { status: s.status } }, `${s.name}: ${s.status}`)))
    : h("p", null, "No prompt sources.");
  const charts = h("div.charts");
  const note = h("div.metrics-note", { "aria-live": "polite" });
  const activity = h("section.activity", { "aria-label": "Activity" }, h("h2", null, "Activity"), note, charts);

  const history = new Map(); // route → [{t, turns, errors, fsum, fcount}]
  for (const r of routes) history.set(r.name, []);
  let timer = null;

  function draw() {
    const figures = [];
    for (const [route, samples] of history) {
      const series = { tpm: [], ttfe: [], errors: [] };
      for (let i = 1; i < samples.length; i += 1) {
        const a = samples[i - 1];
        const b = samples[i];
        const minutes = (b.t - a.t) / 60000;
        series.tpm.push(minutes > 0 ? Math.max(0, b.turns - a.turns) / minutes : 0);
        const n = b.fcount - a.fcount;
        series.ttfe.push(n > 0 ? ((b.fsum - a.fsum) / n) * 1000 : null);
        series.errors.push(Math.max(0, b.errors - a.errors));
      }
      figures.push(h("div.route-charts", { dataset: { route } }, h("h3", null, route), CHARTS.map((c) => chart(c.label, route, series[c.key], c.unit))));
    }
    charts.replaceChildren(...figures);
  }

  function adminForm(detail) {
    const input = h("input", { type: "password", "aria-label": "Admin token", autocomplete: "off" });
    const form = h("form.token", { "aria-label": "Admin token" }, h("label", null, h("span", null, "Admin token"), input), h("button", { type: "submit" }, "Use admin token"));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      tokens.setAdmin(input.value.trim());
      note.replaceChildren(h("p", null, "Reading metrics…"));
      poll();
    });
    note.replaceChildren(h("p", null, `The metrics need the operators' admin token (${detail}).`), form);
  }

  async function poll() {
    clearTimeout(timer);
    try {
      const now = Date.now();
      const by = sample(parseMetrics(await metricsText(signal)));
      for (const [route, s] of by) {
        if (!history.has(route)) history.set(route, []);
      }
      for (const [route, list] of history) {
        list.push({ t: now, ...(by.get(route) || { turns: 0, errors: 0, fsum: 0, fcount: 0 }) });
        if (list.length > KEEP + 1) list.shift();
      }
      note.replaceChildren(h("p", null, `Every ${POLL_MS / 1000} s from /metrics; rates since the page opened.`));
      draw();
    } catch (error) {
      if (error.name === "AbortError") return;
      if (error.status === 401) {
        adminForm(error.message);
        announce("The metrics need the admin token");
        return;
      }
      note.replaceChildren(h("p.error", null, `Metrics unavailable: ${error.message}`));
    }
    timer = setTimeout(poll, POLL_MS);
  }

  draw();
  poll();
  const el = h(
    "section.overview",
    null,
    h("h1", null, "Overview"),
    h("section.routes", { "aria-label": "Routes" }, h("h2", null, "Routes"), routeTable, h("h3", null, "Prompt sources"), sourceList),
    activity,
  );
  return { el, view: "overview", cleanup: () => clearTimeout(timer) };
}
