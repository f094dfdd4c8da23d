// The prompt box: Enter sends, Shift+Enter is a newline, "/" lists the session's slash
// commands (the route's prompts, MCP prompts included) with their argument hints.

import { h } from "./dom.js";

let ids = 0;

/**
 * hooks: send(text) → Promise, cancel() → Promise.
 * Returns {form, setCommands(list), setRunning(bool), focus()}.
 */
export function promptBox(hooks) {
  const n = ++ids;
  const message = h("textarea", {
    "aria-label": "Message",
    rows: "3",
    placeholder: "Message the agent (/ for commands)",
    "aria-autocomplete": "list",
    "aria-controls": `commands-${n}`,
  });
  const list = h("ul.commands", { role: "listbox", "aria-label": "Commands", id: `commands-${n}`, hidden: true });
  const send = h("button", { type: "submit" }, "Send");
  const cancel = h("button.secondary", { type: "button", disabled: true }, "Cancel");
  const form = h("form.prompt", { "aria-label": "Prompt" }, list, message, h("div.prompt-actions", null, send, cancel));
  let commands = [];
  let shown = []; // the commands the list shows now
  let active = -1;
  let running = false;

  function matches() {
    const m = /^\/(\S*)$/.exec(message.value);
    if (!m) return [];
    const prefix = m[1].toLowerCase();
    return commands.filter((c) => c.name.toLowerCase().startsWith(prefix));
  }

  function refresh() {
    shown = matches();
    list.hidden = shown.length === 0;
    if (active >= shown.length) active = shown.length - 1;
    list.replaceChildren(
      ...shown.map((c, i) =>
        h(
          "li",
          { role: "option", id: `command-${n}-${i}`, "aria-selected": String(i === active), dataset: { name: c.name } },
          h("span.command-name", null, `/${c.name}`),
          c.hint ? h("span.command-hint", null, ` ${c.hint}`) : null,
          c.description ? h("span.command-description", null, ` — ${c.description}`) : null,
        ),
      ),
    );
    if (active >= 0) message.setAttribute("aria-activedescendant", `command-${n}-${active}`);
    else message.removeAttribute("aria-activedescendant");
  }

  function choose(index) {
    const c = shown[index];
    if (!c) return;
    message.value = `/${c.name} `;
    active = -1;
    refresh();
    message.focus();
  }

  list.addEventListener("mousedown", (ev) => {
    const li = ev.target.closest("li[role=option]");
    if (!li) return;
    ev.preventDefault(); // keep the focus in the text box
    choose([...list.children].indexOf(li));
  });

  message.addEventListener("input", () => {
    active = -1;
    refresh();
  });

  message.addEventListener("keydown", (ev) => {
    if (!list.hidden) {
      if (ev.key === "ArrowDown" || ev.key === "ArrowUp") {
        ev.preventDefault();
        const step = ev.key === "ArrowDown" ? 1 : -1;
        active = (active + step + shown.length) % shown.length;
        refresh();
        return;
      }
      if ((ev.key === "Tab" || ev.key === "Enter") && active >= 0 && !ev.shiftKey) {
        ev.preventDefault();
        choose(active);
        return;
      }
      if (ev.key === "Escape") {
        ev.preventDefault();
        list.hidden = true;
        return;
      }
    }
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      form.requestSubmit();
    }
  });

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const text = message.value;
    if (!text.trim() || send.disabled) return;
    send.disabled = true;
    try {
      await hooks.send(text);
      message.value = "";
      refresh();
    } finally {
      send.disabled = false;
    }
  });

  cancel.addEventListener("click", async () => {
    cancel.disabled = true;
    try {
      await hooks.cancel();
    } finally {
      cancel.disabled = !running;
    }
  });

  return {
    form,
    setCommands(list_) {
      commands = (list_ || []).filter((c) => c && c.name);
      refresh();
    },
    setRunning(value) {
      running = value;
      cancel.disabled = !value;
    },
    focus: () => message.focus(),
  };
}
