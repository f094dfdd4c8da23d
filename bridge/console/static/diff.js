// A line diff of a tool call's old and new text, as <pre class="diff"> with .add/.del spans.
//
// Common head and tail lines are trimmed, then the middle is diffed by longest common
// subsequence, bounded: past MAX_CELLS (lines × lines) the change is shown plainly as
// the old lines removed and the new ones added, so a huge file never stalls the page.

import { h } from "./dom.js";

const MAX_CELLS = 2_000_000;
const MAX_LINES = 20_000; // shown at most; the rest is summarised
const CONTEXT = 3; // unchanged lines kept around a change

export function lineDiff(oldText, newText) {
  const a = oldText ? oldText.split("\n") : [];
  const b = newText ? newText.split("\n") : [];
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head += 1;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail += 1;
  const midA = a.slice(head, a.length - tail);
  const midB = b.slice(head, b.length - tail);
  const ops = [];
  for (let i = 0; i < head; i += 1) ops.push([" ", a[i]]);
  if (midA.length * midB.length > MAX_CELLS) {
    for (const line of midA) ops.push(["-", line]);
    for (const line of midB) ops.push(["+", line]);
  } else {
    ops.push(...lcs(midA, midB));
  }
  for (let i = a.length - tail; i < a.length; i += 1) ops.push([" ", a[i]]);
  return ops;
}

function lcs(a, b) {
  const n = a.length;
  const m = b.length;
  const width = m + 1;
  const table = new Uint32Array((n + 1) * width);
  for (let i = n - 1; i >= 0; i -= 1) {
    for (let j = m - 1; j >= 0; j -= 1) {
      table[i * width + j] =
        a[i] === b[j] ? table[(i + 1) * width + j + 1] + 1 : Math.max(table[(i + 1) * width + j], table[i * width + j + 1]);
    }
  }
  const ops = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      ops.push([" ", a[i]]);
      i += 1;
      j += 1;
    } else if (table[(i + 1) * width + j] >= table[i * width + j + 1]) ops.push(["-", a[i++]]);
    else ops.push(["+", b[j++]]);
  }
  while (i < n) ops.push(["-", a[i++]]);
  while (j < m) ops.push(["+", b[j++]]);
  return ops;
}

/** The diff of one ToolCallContent of type "diff" (path, old_text, new_text). */
export function renderDiff(item) {
  const ops = lineDiff(item.old_text || "", item.new_text || "");
  const pre = h("pre.diff", { "aria-label": item.path ? `Diff of ${item.path}` : "Diff", tabindex: "0" });
  const keep = new Uint8Array(ops.length);
  ops.forEach(([op], index) => {
    if (op === " ") return;
    for (let k = Math.max(0, index - CONTEXT); k <= Math.min(ops.length - 1, index + CONTEXT); k += 1) keep[k] = 1;
  });
  let shown = 0;
  let skipped = 0;
  ops.forEach(([op, line], index) => {
    if (!keep[index] || shown >= MAX_LINES) {
      skipped += 1;
      return;
    }
    if (skipped) {
      pre.append(h("span.skip", null, `… ${skipped} unchanged line${skipped === 1 ? "" : "s"}\n`));
      skipped = 0;
    }
    shown += 1;
    const cls = op === "+" ? "span.add" : op === "-" ? "span.del" : "span.ctx";
    pre.append(h(cls, null, `${op} ${line}\n`));
  });
  if (skipped) pre.append(h("span.skip", null, `… ${skipped} more line${skipped === 1 ? "" : "s"}\n`));
  const figure = h("figure.diff-file");
  if (item.path) figure.append(h("figcaption", null, item.path));
  figure.append(pre);
  return figure;
}
