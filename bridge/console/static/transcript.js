// A session's transcript, rendered from canonical events (bridge/core/events.py as JSON).
//
// Events are queued and applied once per animation frame, so a long replay costs one
// layout. Consecutive chunks of one message grow one text node; the message is rendered
// as Markdown once it stops growing (another event follows, or it is idle a moment).
// Events carrying `parent_tool_call_id` (a sub-agent's) go inside that tool call.

import { h } from "./dom.js";
import { renderMarkdown } from "./markdown.js";
import { renderDiff } from "./diff.js";
import { questionForm, answeredText } from "./question.js";

const IDLE_RENDER_MS = 400;

/** Plain words for a list of content blocks (prompt, progress, tool content). */
export function blocksText(blocks) {
  return (blocks || []).map(blockText).join("");
}

function blockText(block) {
  if (!block) return "";
  switch (block.type) {
    case "text":
      return block.text || "";
    case "resource_link":
      return `[${block.name || block.uri}]`;
    case "resource":
      return block.resource?.text ?? `[${block.resource?.uri || "resource"}]`;
    case "data":
      return JSON.stringify(block.data);
    default:
      return `[${block.type}]`;
  }
}

class Scope {
  // Where events of one turn (or of one sub-agent inside it) are appended.
  constructor(el) {
    this.el = el;
    this.run = null; // the message growing now: {thought, id, el, node, raw, rendered}
    this.plan = null;
  }
}

export class Transcript {
  /**
   * root: the element to render into. hooks: answer(questionId, answer) → Promise,
   * commands(list), turn(open: bool, event), asking(open: bool) when a question is asked or answered.
   */
  constructor(root, hooks = {}) {
    this.root = root;
    this.hooks = hooks;
    this.queue = [];
    this.scheduled = false;
    this.lastSeq = 0;
    this.current = null; // the Scope of the newest turn
    this.tools = new Map(); // tool_call_id → {article, title, status, locations, content, sub}
    this.questions = new Map(); // question_id → {form, question}
    this.growing = new Set(); // runs whose text node lags their raw text
    this.idle = null;
    this.openTurn = null;
  }

  /** Queue one canonical event (an object); events at or below the last seq are ignored. */
  push(event) {
    if (typeof event.seq === "number") {
      if (event.seq <= this.lastSeq) return;
      this.lastSeq = event.seq;
    }
    this.queue.push(event);
    this.schedule();
  }

  /** A marker in the queue: `fn` runs after every event pushed before it is rendered. */
  after(fn) {
    this.queue.push({ event: "_call", fn });
    this.schedule();
  }

  schedule() {
    if (this.scheduled) return;
    this.scheduled = true;
    requestAnimationFrame(() => this.flush());
  }

  flush() {
    this.scheduled = false;
    const batch = this.queue;
    this.queue = [];
    for (const event of batch) {
      if (event.event === "_call") {
        this.sync();
        event.fn();
        continue;
      }
      try {
        this.apply(event);
      } catch (error) {
        console.error("event not rendered", event, error);
      }
    }
    this.sync();
  }

  sync() {
    for (const run of this.growing) run.node.data = run.raw;
    this.growing.clear();
    this.root.dataset.lastSeq = String(this.lastSeq);
    clearTimeout(this.idle);
    this.idle = setTimeout(() => this.renderOpenRuns(), IDLE_RENDER_MS);
  }

  // -- scopes -------------------------------------------------------------------------
  scopeFor(event) {
    const parent = event.parent_tool_call_id && this.tools.get(event.parent_tool_call_id);
    if (parent) {
      if (!parent.sub) {
        const el = h("div.subagent", { "aria-label": "Sub-agent" });
        parent.article.append(el);
        parent.sub = new Scope(el);
      }
      return parent.sub;
    }
    if (!this.current) this.current = this.newTurn(null);
    return this.current;
  }

  newTurn(turnId) {
    const section = h("section.turn", turnId ? { dataset: { turnId } } : null);
    this.root.append(section);
    return new Scope(section);
  }

  closeRun(scope) {
    if (scope.run) this.render(scope.run);
    scope.run = null;
  }

  render(run) {
    if (run.rendered) return;
    run.rendered = true;
    this.growing.delete(run);
    run.el.replaceChildren(renderMarkdown(run.raw));
  }

  renderOpenRuns() {
    const scopes = [this.current, ...[...this.tools.values()].map((t) => t.sub)];
    for (const scope of scopes) if (scope?.run) this.render(scope.run);
  }

  // -- events -------------------------------------------------------------------------
  apply(e) {
    switch (e.event) {
      case "turn_started":
        return this.turnStarted(e);
      case "message_chunk":
        return this.chunk(e);
      case "progress":
        return this.note(e, h("p.progress", null, blocksText(e.content)));
      case "tool_call_started":
        return this.toolStarted(e);
      case "tool_call_updated":
        return this.toolUpdated(e);
      case "plan_updated":
        return this.plan(e);
      case "question_asked":
        return this.question(e);
      case "question_answered":
        return this.answered(e);
      case "artifact_updated":
        return this.artifact(e);
      case "usage":
        return this.note(e, h("p.usage", null, usageText(e)));
      case "commands":
        return this.hooks.commands?.(e.commands || []);
      case "turn_ended":
        return this.turnEnded(e);
      default:
        return undefined; // options and events of later versions: nothing to show
    }
  }

  turnStarted(e) {
    if (this.current) this.closeRun(this.current);
    this.current = this.newTurn(e.turn_id);
    this.current.el.append(h("div.prompt", { "aria-label": "Prompt" }, blocksText(e.prompt)));
    this.openTurn = e.turn_id;
    this.hooks.turn?.(true, e);
  }

  chunk(e) {
    const scope = this.scopeFor(e);
    const thought = Boolean(e.thought);
    let run = scope.run;
    if (!run || run.thought !== thought || (e.message_id && run.id && e.message_id !== run.id)) {
      this.closeRun(scope);
      const node = document.createTextNode("");
      let el;
      if (thought) {
        el = h("div.body", null, node);
        scope.el.append(h("details.thought", null, h("summary", null, "Thought"), el));
      } else {
        el = h("div.text", null, node);
        scope.el.append(el);
      }
      run = scope.run = { thought, id: e.message_id || null, el, node, raw: "", rendered: false };
    }
    if (run.rendered) {
      run.rendered = false; // it grows again: plain text until it stops
      run.el.replaceChildren(run.node);
    }
    run.raw += blockText(e.content);
    this.growing.add(run);
  }

  note(e, el) {
    const scope = this.scopeFor(e);
    this.closeRun(scope);
    scope.el.append(el);
  }

  toolStarted(e) {
    const scope = this.scopeFor(e);
    this.closeRun(scope);
    const title = h("span.title", null, e.title || e.name || "Tool call");
    const status = h("span.tool-status", null, e.status || "pending");
    const locations = h("ul.locations", { hidden: true });
    const content = h("div.tool-content");
    const article = h(
      "article.tool",
      { dataset: { toolCallId: e.tool_call_id, status: e.status || "pending", kind: e.kind || "other" } },
      h("header", null, h("span.kind", null, e.kind || "other"), title, status),
      locations,
      content,
    );
    scope.el.append(article);
    const tool = { article, title, status, locations, content, sub: null };
    this.tools.set(e.tool_call_id, tool);
    this.fillTool(tool, e);
  }

  toolUpdated(e) {
    const tool = this.tools.get(e.tool_call_id);
    if (!tool) return this.toolStarted({ ...e, title: e.title || e.tool_call_id });
    if (e.title) tool.title.textContent = e.title;
    if (e.kind) tool.article.dataset.kind = e.kind;
    if (e.status) {
      tool.article.dataset.status = e.status;
      tool.status.textContent = e.status;
    }
    this.fillTool(tool, e);
    return undefined;
  }

  fillTool(tool, e) {
    if (e.locations) {
      tool.locations.replaceChildren(
        ...e.locations.map((l) => h("li", null, h("code", null, l.line != null ? `${l.path}:${l.line}` : l.path))),
      );
      tool.locations.hidden = e.locations.length === 0;
    }
    if (e.content) tool.content.replaceChildren(...e.content.map(toolContent));
  }

  plan(e) {
    const scope = this.scopeFor(e);
    const items = (e.entries || []).map((entry) =>
      h(
        "li",
        { dataset: { status: entry.status || "pending", priority: entry.priority || "medium" } },
        h("input", { type: "checkbox", disabled: true, checked: entry.status === "completed", "aria-label": entry.status }),
        " ",
        h("span", null, entry.content),
      ),
    );
    if (scope.plan) scope.plan.replaceChildren(...items);
    else {
      this.closeRun(scope);
      scope.plan = h("ul.plan", { "aria-label": "Plan" }, items);
      scope.el.append(scope.plan);
    }
  }

  question(e) {
    const scope = this.scopeFor(e);
    this.closeRun(scope);
    const q = e.question;
    const form = questionForm(q, (answer) => this.hooks.answer?.(q.id, answer));
    this.questions.set(q.id, { form, question: q });
    const tool = q.tool_call_id && this.tools.get(q.tool_call_id);
    (tool ? tool.article : scope.el).append(form);
    this.hooks.asking?.(true);
  }

  answered(e) {
    const asked = this.questions.get(e.question_id);
    if (!asked) return;
    asked.form.replaceWith(h("p.answered", { dataset: { questionId: e.question_id } }, answeredText(asked.question, e)));
    this.questions.delete(e.question_id);
    this.hooks.asking?.(false);
  }

  artifact(e) {
    const scope = this.scopeFor(e);
    this.closeRun(scope);
    let el = scope.el.querySelector(`.artifact[data-artifact-id="${CSS.escape(e.artifact_id)}"]`);
    if (!el) {
      el = h("div.artifact", { dataset: { artifactId: e.artifact_id } }, h("div.artifact-name", null, e.name || "Artifact"));
      el.body = h("pre.artifact-body");
      el.append(el.body);
      scope.el.append(el);
    }
    const text = blocksText(e.parts);
    if (e.append) el.body.append(text);
    else el.body.textContent = text;
  }

  turnEnded(e) {
    const scope = this.current || this.scopeFor(e);
    for (const tool of this.tools.values()) if (tool.sub) this.closeRun(tool.sub);
    this.closeRun(scope);
    for (const { form } of this.questions.values()) form.querySelectorAll("button").forEach((b) => (b.disabled = true));
    scope.el.append(h("p.stop", { dataset: { stopReason: e.stop_reason } }, "Stop reason: ", h("code", null, e.stop_reason)));
    if (e.error) scope.el.append(h("p.error", { role: "alert" }, e.error.message || "failed"));
    this.openTurn = null;
    this.hooks.turn?.(false, e);
  }
}

function toolContent(item) {
  if (item.type === "diff") return renderDiff(item);
  if (item.type === "terminal") return h("p.terminal", null, `Terminal ${item.terminal_id || ""}`);
  const text = blockText(item.content);
  return h("pre.output", { tabindex: "0" }, text.length > 100_000 ? `${text.slice(0, 100_000)}\n…` : text);
}

function usageText(e) {
  const parts = [];
  if (e.size) parts.push(`context ${e.used.toLocaleString()} / ${e.size.toLocaleString()}`);
  else if (e.used) parts.push(`context ${e.used.toLocaleString()}`);
  if (e.input_tokens != null) parts.push(`in ${e.input_tokens.toLocaleString()}`);
  if (e.output_tokens != null) parts.push(`out ${e.output_tokens.toLocaleString()}`);
  if (e.cost_amount != null) parts.push(`cost ${e.cost_amount} ${e.cost_currency || ""}`.trim());
  return `Usage: ${parts.join(" · ") || "reported"}`;
}
