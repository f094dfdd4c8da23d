// Building DOM nodes without HTML strings: agent text only ever becomes text nodes.

/** h("tag.class", {attr: value, onclick: fn, dataset: {...}}, ...children) */
export function h(spec, attrs, ...children) {
  const [tag, ...classes] = spec.split(".");
  const el = document.createElement(tag || "div");
  if (classes.length) el.className = classes.join(" ");
  if (attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
      else if (key === "dataset") Object.assign(el.dataset, value);
      else if (key === "text") el.textContent = value;
      else if (value === true) el.setAttribute(key, "");
      else el.setAttribute(key, String(value));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

const SVG = "http://www.w3.org/2000/svg";

export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  for (const child of children) if (child != null) el.append(child);
  return el;
}

/** Say something to screen readers (and sighted users) in the page's polite live region. */
let fading = null;

/** Say `text` in the status line (read by screen readers); it fades after a few seconds. */
export function announce(text) {
  const status = document.getElementById("status");
  if (!status) return;
  status.textContent = text;
  clearTimeout(fading);
  fading = setTimeout(() => {
    status.textContent = "";
  }, 5000);
}

export function setView(name) {
  document.documentElement.dataset.view = name;
}

export function relTime(iso) {
  if (!iso) return "";
  const when = new Date(iso);
  const s = Math.round((Date.now() - when.getTime()) / 1000);
  if (s < 60) return `${Math.max(s, 0)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return when.toLocaleDateString();
}
