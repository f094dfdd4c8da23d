// The sessions of every front, newest first: filters, counts, and live updates from the
// change feed (`GET /api/changes`), with a full refetch on `reset`, on reconnect and
// every 30 s (changes owned by another instance may reach the feed late).

import { api, ApiError, enc, Stream } from "./api.js";
import { announce, h, relTime } from "./dom.js";

const PAGE = 100;
const STATUSES = ["created", "running", "waiting_for_input", "completed", "failed", "interrupted"];
const FRONTS = ["acp", "chat", "a2a", "mcp", "cli"];
const filters = { route: "", status: "", front: "", q: "" }; // kept while the tab lives
const words = (status) => status.replaceAll("_", " ");

/** The routes (GET /api/routes), or none when the API is missing; a 401 still propagates. */
export async function routesOf(signal) {
  try {
    return await api("/api/routes", { signal });
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) throw error;
    if (error.name === "AbortError") throw error;
    return { routes: [], prompt_sources: [] };
  }
}

function select(label, values, current, names = words) {
  const el = h("select", { "aria-label": label }, h("option", { value: "" }, `All`));
  for (const value of values) el.append(h("option", { value, selected: value === current }, names(value)));
  return el;
}

function matches(info) {
  if (filters.route && info.route !== filters.route) return false;
  if (filters.status && info.status !== filters.status) return false;
  if (filters.front && info.front !== filters.front) return false;
  if (filters.q && !(info.title || "").toLowerCase().includes(filters.q.toLowerCase())) return false;
  return true;
}

function row(info) {
  const label = info.title || info.session_id;
  return h(
    "tr",
    { dataset: { sessionId: info.session_id, status: info.status, front: info.front || "" } },
    h("td.title", null, h("a", { href: `#/s/${enc(info.session_id)}` }, label)),
    h("td", { "data-label": "Route" }, info.route || "—"),
    h("td", { "data-label": "Protocol" }, info.front || "—"),
    h("td", { "data-label": "Status" }, h("span.badge", { dataset: { status: info.status } }, words(info.status))),
    h("td", { "data-label": "Turns" }, info.turn_count ?? ""),
    h("td", { "data-label": "Updated" }, h("time", { datetime: info.updated_at, title: info.updated_at }, relTime(info.updated_at))),
  );
}

function countsText(counts, sessions) {
  let byStatus = counts && counts.status;
  if (!byStatus) {
    byStatus = {};
    for (const s of sessions) byStatus[s.status] = (byStatus[s.status] || 0) + 1;
  }
  const parts = STATUSES.filter((s) => byStatus[s]).map((s) => `${byStatus[s]} ${words(s)}`);
  return parts.join(" · ") || "no sessions";
}

export async function sessionsView({ signal }) {
  const { routes } = await routesOf(signal);
  const routeSel = select("Route", routes.map((r) => r.name), filters.route, (v) => v);
  const statusSel = select("Status", STATUSES, filters.status);
  const frontSel = select("Protocol", FRONTS, filters.front, (v) => v);
  const search = h("input", { type: "search", "aria-label": "Search titles", placeholder: "Search titles", value: filters.q });
  const counts = h("p.counts", { "data-counts": "", "aria-live": "polite" });
  const body = h("tbody");
  const table = h(
    "table.sessions",
    { "aria-label": "Sessions" },
    h("thead", null, h("tr", null, ...["Title", "Route", "Protocol", "Status", "Turns", "Updated"].map((t) => h("th", { scope: "col" }, t)))),
    body,
  );
  const older = h("button.secondary", { type: "button", hidden: true }, "Older");
  const newer = h("button.secondary", { type: "button", hidden: true }, "Newer");
  let offset = 0;
  let total = 0;

  async function load(announceIt = false) {
    const query = new URLSearchParams({ limit: String(PAGE), offset: String(offset), counts: "1" });
    for (const [key, value] of Object.entries(filters)) if (value) query.set(key, value);
    const page = await api(`/api/sessions?${query}`, { signal });
    body.replaceChildren(...page.sessions.map(row));
    total = page.total;
    counts.textContent = countsText(page.counts, page.sessions);
    older.hidden = offset + PAGE >= total;
    newer.hidden = offset === 0;
    if (announceIt) announce(`${total} session${total === 1 ? "" : "s"}`);
  }

  // At most one reload a second however busy the feed is (a debounce would starve).
  let pending = null;
  const reloadSoon = () => {
    if (pending !== null) return;
    pending = setTimeout(() => {
      pending = null;
      load().catch(() => {});
    }, 1000);
  };

  function changed(info) {
    const old = body.querySelector(`tr[data-session-id="${CSS.escape(info.session_id)}"]`);
    if (!matches(info)) old?.remove();
    else if (old) old.replaceWith(row(info));
    else if (offset === 0) body.prepend(row(info));
    reloadSoon(); // counts, order and totals from the server
  }

  const refilter = () => {
    filters.route = routeSel.value;
    filters.status = statusSel.value;
    filters.front = frontSel.value;
    filters.q = search.value.trim().slice(0, 200);
    offset = 0;
    load(true).catch((error) => announce(`Not loaded: ${error.message}`));
  };
  for (const el of [routeSel, statusSel, frontSel]) el.addEventListener("change", refilter);
  let typing = null;
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(refilter, 250);
  });
  older.addEventListener("click", () => {
    offset += PAGE;
    load(true);
  });
  newer.addEventListener("click", () => {
    offset = Math.max(0, offset - PAGE);
    load(true);
  });

  await load();
  const feed = new Stream("/api/changes", {
    onEvent(message) {
      if (message.event === "session") changed(JSON.parse(message.data));
      else if (message.event === "deleted") {
        const { session_id: id } = JSON.parse(message.data);
        body.querySelector(`tr[data-session-id="${CSS.escape(id)}"]`)?.remove();
        reloadSoon();
      } else if (message.event === "reset") reloadSoon();
    },
    onOpen(resumed) {
      if (resumed) reloadSoon();
    },
    onError() {},
  });
  const every = setInterval(() => load().catch(() => {}), 30_000);

  const el = h(
    "section.sessions-view",
    null,
    h("h1", null, "Sessions"),
    h(
      "div.filters",
      null,
      h("label", null, h("span", null, "Route"), routeSel),
      h("label", null, h("span", null, "Status"), statusSel),
      h("label", null, h("span", null, "Protocol"), frontSel),
      h("label.grow", null, h("span", null, "Search"), search),
    ),
    counts,
    h("div.table-wrap", null, table),
    h("div.pager", null, newer, older),
  );
  return {
    el,
    view: "sessions",
    cleanup() {
      feed.close();
      clearInterval(every);
      clearTimeout(pending);
      clearTimeout(typing);
    },
  };
}

export async function newSessionView({ signal }) {
  const { routes } = await routesOf(signal);
  const routeSel = h("select", { "aria-label": "Route", required: true });
  for (const r of routes) {
    const text = r.description ? `${r.name} — ${r.description}` : r.name;
    routeSel.append(h("option", { value: r.name, selected: Boolean(r.default) }, text));
  }
  const start = h("button", { type: "submit" }, "Start");
  const error = h("p.error", { role: "alert", hidden: true });
  const form = h(
    "form.new-session",
    { "aria-label": "New session" },
    h("label", null, h("span", null, "Route"), routeSel),
    start,
    error,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    start.disabled = true;
    error.hidden = true;
    try {
      const body = routeSel.value ? { route: routeSel.value } : {};
      const { session_id: id } = await api("/api/sessions", { method: "POST", body });
      location.hash = `#/s/${enc(id)}`;
    } catch (e) {
      error.textContent = `Not started: ${e.message}`;
      error.hidden = false;
      start.disabled = false;
    }
  });
  const el = h("section.new-view", null, h("h1", null, "New session"), form);
  return { el, view: "new", focus: () => routeSel.focus() };
}
