// A question from the agent, answered in place: permission buttons by kind, one choice,
// several (checkboxes + Submit), free text, or a form drawn from its JSON Schema.

import { h } from "./dom.js";

/** The form for a Question; `send(answer)` posts {selected, text, values} and may reject. */
export function questionForm(q, send) {
  const form = h("form.question", { "aria-label": "Question", dataset: { questionId: q.id, kind: q.kind } });
  if (q.header) form.append(h("p.question-header", null, q.header));
  form.append(h("p.question-prompt", null, q.prompt));
  const error = h("p.error", { role: "alert", hidden: true });
  const buttons = () => form.querySelectorAll("button, input, textarea, select");

  async function submit(answer) {
    buttons().forEach((el) => (el.disabled = true));
    error.hidden = true;
    try {
      await send(answer);
    } catch (e) {
      error.textContent = `Not answered: ${e.message}`;
      error.hidden = false;
      buttons().forEach((el) => (el.disabled = false));
    }
  }

  const textBox = q.allow_text ? h("textarea", { "aria-label": "Answer", rows: "2" }) : null;
  const text = () => (textBox && textBox.value.trim() ? textBox.value : null);
  const options = q.options || [];

  if (q.kind === "form" && q.schema) {
    const fields = schemaFields(q.schema);
    form.append(...fields.map((f) => f.row));
    form.append(h("button", { type: "submit" }, "Submit"));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const values = {};
      for (const f of fields) {
        const value = f.value();
        if (value !== undefined) values[f.name] = value;
      }
      submit({ selected: [], text: null, values });
    });
  } else if (q.multi_select) {
    const boxes = options.map((o) => h("input", { type: "checkbox", value: o.id, dataset: { kind: o.kind } }));
    form.append(h("fieldset.choices", null, h("legend", null, "Choose any"), ...options.map((o, i) => h("label", null, boxes[i], " ", o.label))));
    if (textBox) form.append(textBox);
    form.append(h("button", { type: "submit" }, "Submit"));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      submit({ selected: boxes.filter((b) => b.checked).map((b) => b.value), text: text() });
    });
  } else {
    const row = h("div.options");
    for (const o of options) {
      const button = h("button", { type: "button", dataset: { kind: o.kind || "choice", optionId: o.id }, title: o.description }, o.label);
      button.addEventListener("click", () => submit({ selected: [o.id], text: text() }));
      row.append(button);
    }
    form.append(row);
    if (textBox) {
      form.append(textBox, h("button", { type: "submit" }, "Submit"));
    }
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      if (textBox) submit({ selected: [], text: textBox.value });
    });
  }
  form.append(error);
  return form;
}

function schemaFields(schema) {
  const required = new Set(schema.required || []);
  return Object.entries(schema.properties || {}).map(([name, prop]) => {
    const label = prop.title || name;
    let input;
    let value;
    if (Array.isArray(prop.enum)) {
      input = h("select", { "aria-label": label }, ...prop.enum.map((v) => h("option", { value: String(v) }, String(v))));
      value = () => input.value;
    } else if (prop.type === "boolean") {
      input = h("input", { type: "checkbox", "aria-label": label, checked: prop.default === true });
      value = () => input.checked;
    } else if (prop.type === "number" || prop.type === "integer") {
      input = h("input", { type: "number", "aria-label": label, step: prop.type === "integer" ? "1" : "any", required: required.has(name) });
      value = () => (input.value === "" ? undefined : Number(input.value));
    } else {
      input = h("input", { type: "text", "aria-label": label, required: required.has(name) });
      value = () => (input.value === "" ? undefined : input.value);
    }
    const row = h("label.field", null, h("span", null, label), input);
    if (prop.description) row.append(h("small", null, prop.description));
    return { name, row, value };
  });
}

/** What the transcript says once a question is answered. */
export function answeredText(q, answer) {
  if (answer.cancelled) return "Question cancelled";
  const labels = new Map((q.options || []).map((o) => [o.id, o.label]));
  const parts = (answer.selected || []).map((id) => labels.get(id) || id);
  if (answer.text) parts.push(`“${answer.text}”`);
  if (answer.values) parts.push(JSON.stringify(answer.values));
  const by = answer.by && answer.by !== "user" ? ` (by ${answer.by})` : "";
  return `Answered: ${parts.join(", ") || "nothing"}${by}`;
}
