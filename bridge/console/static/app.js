// The console's router: hash routes (#/, #/s/<id>, #/new, #/overview), the token form on
// any 401, and one view at a time (the previous one's streams are closed first).

import { setUnauthorizedHandler, tokens } from "./api.js";
import { announce, h, setView } from "./dom.js";
import { overviewView } from "./overview.js";
import { sessionView } from "./session.js";
import { newSessionView, sessionsView } from "./sessions.js";

const main = document.getElementById("main");
let current = null; // {controller, cleanup}

function parse(hash) {
  const path = hash.replace(/^#/, "") || "/";
  const session = /^\/s\/(.+)$/.exec(path);
  if (session) return { name: "session", load: (ctx) => sessionView(decodeURIComponent(session[1]), ctx) };
  if (path === "/new") return { name: "new", load: newSessionView };
  if (path === "/overview") return { name: "overview", load: overviewView };
  return { name: "sessions", load: sessionsView };
}

function leave() {
  if (!current) return;
  current.controller.abort();
  current.cleanup?.();
  current = null;
}

function markNav(name) {
  const target = { sessions: "#/", new: "#/new", overview: "#/overview" }[name];
  for (const a of document.querySelectorAll("nav a")) {
    if (a.getAttribute("href") === target) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
}

async function show() {
  leave();
  const route = parse(location.hash);
  const controller = new AbortController();
  const mine = { controller, cleanup: null };
  current = mine;
  markNav(route.name);
  delete document.documentElement.dataset.transcript;
  try {
    const view = await route.load({ signal: controller.signal });
    if (current !== mine) {
      view.cleanup?.(); // the user went elsewhere while it loaded
      return;
    }
    mine.cleanup = view.cleanup;
    main.replaceChildren(view.el);
    setView(view.view);
    view.focus?.();
  } catch (error) {
    if (current !== mine || error.name === "AbortError" || error.status === 401) return;
    main.replaceChildren(h("section.failure", null, h("h1", null, "Not available"), h("p.error", { role: "alert" }, error.message)));
    setView(route.name);
    announce(error.message);
  }
}

/** Shown instead of any view when the API answers 401: nothing of the sessions before it. */
function askToken() {
  if (document.documentElement.dataset.view === "token") return;
  const hadToken = Boolean(tokens.get());
  leave();
  tokens.set(null);
  const input = h("input", { type: "password", "aria-label": "Token", autocomplete: "current-password", required: true });
  const form = h(
    "form.token",
    { "aria-label": "Access token" },
    h("label", null, h("span", null, "Token"), input),
    h("button", { type: "submit" }, "Sign in"),
  );
  const why = hadToken ? "That token was refused. " : "";
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    tokens.set(input.value.trim());
    delete document.documentElement.dataset.view; // a refusal shows this form again
    show();
  });
  main.replaceChildren(
    h(
      "section.token-view",
      null,
      h("h1", null, "Sign in"),
      h("p", null, `${why}This daemon needs its access token ([ws] token). It is kept in this tab only.`),
      form,
    ),
  );
  setView("token");
  markNav("");
  input.focus();
  announce("Sign in with the access token");
}

setUnauthorizedHandler(askToken);
window.addEventListener("hashchange", show);
show();
