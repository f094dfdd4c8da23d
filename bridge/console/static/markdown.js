// A small Markdown renderer that builds DOM nodes (CommonMark's common subset).
//
// Agent output is hostile: it never reaches innerHTML. Raw HTML is shown as text, a
// link is kept only for http:, https: and mailto: (rel="noopener noreferrer"), and an
// image becomes its alt text (no remote fetch from a page holding a token).

import { h } from "./dom.js";

const SAFE_LINK = /^(https?:|mailto:)/i;
const MAX_INPUT = 200_000; // longer messages are shown as plain text

export function renderMarkdown(text) {
  const out = document.createDocumentFragment();
  if (text.length > MAX_INPUT) {
    out.append(h("pre.plain", null, text));
    return out;
  }
  const lines = text.replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = /^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)/.exec(line);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trimStart().startsWith(fence[1])) body.push(lines[i++]);
      i += 1;
      const code = h("code", fence[2] ? { "data-lang": fence[2] } : null, body.join("\n"));
      out.append(h("pre", null, code));
      continue;
    }
    if (/^\s*$/.test(line)) {
      i += 1;
      continue;
    }
    const heading = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading) {
      // h1 is the page's title: agent headings start one level below.
      const level = Math.min(heading[1].length + 1, 6);
      out.append(inline(h(`h${level}`), heading[2]));
      i += 1;
      continue;
    }
    if (/^ {0,3}([-*_])(\s*\1){2,}\s*$/.test(line)) {
      out.append(h("hr"));
      i += 1;
      continue;
    }
    if (/^ {0,3}>/.test(line)) {
      const body = [];
      while (i < lines.length && /^ {0,3}>/.test(lines[i])) body.push(lines[i++].replace(/^ {0,3}> ?/, ""));
      out.append(h("blockquote", null, renderMarkdown(body.join("\n"))));
      continue;
    }
    const item = /^ {0,3}([-*+]|\d{1,9}[.)])\s+/.exec(line);
    if (item) {
      const ordered = /\d/.test(item[1]);
      const list = h(ordered ? "ol" : "ul");
      while (i < lines.length) {
        const m = /^ {0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/.exec(lines[i]);
        if (!m || /\d/.test(m[1]) !== ordered) break;
        const body = [m[2]];
        i += 1;
        while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !/^ {0,3}([-*+]|\d{1,9}[.)])\s+/.test(lines[i])) {
          body.push(lines[i++].trim());
        }
        const task = /^\[([ xX])\]\s+(.*)$/s.exec(body.join("\n"));
        const li = h("li");
        if (task) {
          li.append(h("input", { type: "checkbox", disabled: true, checked: task[1] !== " " }), " ");
          inline(li, task[2]);
        } else inline(li, body.join("\n"));
        list.append(li);
      }
      out.append(list);
      continue;
    }
    const para = [];
    while (i < lines.length && !/^\s*$/.test(lines[i]) && !startsBlock(lines[i])) para.push(lines[i++]);
    if (!para.length) para.push(lines[i++]);
    out.append(inline(h("p"), para.join("\n")));
  }
  return out;
}

function startsBlock(line) {
  return /^ {0,3}(`{3,}|~{3,}|#{1,6}\s|>|[-*+]\s|\d{1,9}[.)]\s)/.test(line);
}

// Inline spans, in order of precedence: code, images, links, autolinks, strong, emphasis.
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|!\[([^\]]*)\]\(([^)\s]*)(?:\s+"[^"]*")?\)|\[([^\]]+)\]\(([^)\s]*)(?:\s+"[^"]*")?\)|<((?:https?:\/\/|mailto:)[^>\s]+)>|(\*\*|__)(?=\S)([\s\S]*?\S)\8|(\*|_)(?=\S)([\s\S]*?\S)\10(?![\w])/;

export function inline(parent, text) {
  let rest = text;
  let guard = 0;
  while (rest && guard++ < 10_000) {
    const m = INLINE.exec(rest);
    if (!m) break;
    if (m.index > 0) appendText(parent, rest.slice(0, m.index));
    if (m[1]) parent.append(h("code", null, m[2].replace(/^ (.*) $/, "$1")));
    else if (m[4] !== undefined && m[0].startsWith("!")) parent.append(m[3] ? `[${m[3]}]` : "[image]");
    else if (m[5] !== undefined) parent.append(link(m[6], m[5]));
    else if (m[7]) parent.append(link(m[7], m[7]));
    else if (m[8]) parent.append(inline(h("strong"), m[9]));
    else if (m[10]) parent.append(inline(h("em"), m[11]));
    rest = rest.slice(m.index + m[0].length);
  }
  if (rest) appendText(parent, rest);
  return parent;
}

function appendText(parent, text) {
  // A hard line break inside a paragraph (two trailing spaces or a newline) stays one.
  const parts = text.split("\n");
  parts.forEach((part, index) => {
    if (index) parent.append(h("br"));
    if (part) parent.append(part);
  });
}

function link(href, label) {
  if (!SAFE_LINK.test(href)) return inline(h("span"), label);
  const a = h("a", { href, rel: "noopener noreferrer nofollow", target: "_blank" });
  return inline(a, label);
}
