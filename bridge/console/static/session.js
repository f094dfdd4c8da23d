// One session: who opened it and what runs it, its transcript (history, then live), the
// prompt box, questions answered in place, and "Load earlier" for turns before the tail.

import { api, enc, Stream } from "./api.js";
import { announce, h } from "./dom.js";
import { promptBox } from "./prompt.js";
import { Transcript } from "./transcript.js";

const TAIL_TURNS = 20;
const ENDED_STATUS = { cancelled: "interrupted", failed: "failed", input_required: "waiting_for_input" };

export async function sessionView(id, { signal }) {
  const base = `/api/sessions/${enc(id)}`;
  const info = await api(base, { signal });
  const title = h("h1", null, info.title || id);
  const fields = {};
  const field = (name, label) => {
    fields[name] = h("dd", { dataset: { field: name } }, info[name] ?? "—");
    return [h("dt", null, label), fields[name]];
  };
  const dl = h("dl.facts", null, field("front", "Protocol"), field("back", "Back"), field("route", "Route"), field("status", "Status"));
  fields.status.setAttribute("aria-live", "polite");
  const log = h("div.transcript", { role: "log", "aria-label": "Transcript", "aria-live": "off", dataset: { lastSeq: "0", connection: "reconnecting" } });
  const earlier = h("button.secondary.earlier", { type: "button", hidden: true }, "Load earlier");
  const connection = h("span.connection", { "aria-live": "polite" }, "connecting…");

  const setStatus = (status) => {
    fields.status.textContent = status;
    fields.status.dataset.status = status;
  };
  setStatus(info.status);

  const prompt = promptBox({
    async send(text) {
      try {
        await api(`${base}/prompt`, { method: "POST", body: { text } });
        announce("Prompt sent");
      } catch (error) {
        announce(error.status === 409 ? "A turn is running: wait for it or cancel it" : `Not sent: ${error.message}`);
        throw error;
      }
    },
    async cancel() {
      const { cancelled } = await api(`${base}/cancel`, { method: "POST" });
      announce(cancelled ? "Cancelling the turn" : "No turn was running");
    },
  });
  prompt.setCommands(info.commands || []);

  const answer = (questionId, { selected = [], text = null, values = null }) =>
    api(`${base}/answer`, { method: "POST", body: { question_id: questionId, selected, text, values } });

  let caughtUp = false;
  const transcript = new Transcript(log, {
    answer,
    commands: (list) => prompt.setCommands(list),
    turn(open, event) {
      prompt.setRunning(open);
      if (open) setStatus("running");
      else setStatus(ENDED_STATUS[event.stop_reason] || "completed");
      if (caughtUp) refreshInfo(); // a first prompt titles the session
    },
    asking(open) {
      setStatus(open ? "waiting_for_input" : "running");
    },
  });

  async function refreshInfo() {
    try {
      const fresh = await api(base);
      title.textContent = fresh.title || id;
      for (const name of ["front", "back", "route"]) fields[name].textContent = fresh[name] ?? "—";
    } catch {
      // the view shows what it had: the next turn's end asks again
    }
  }

  let firstSeq = null;
  const stream = new Stream(`${base}/events?tail_turns=${TAIL_TURNS}`, {
    onEvent(message) {
      if (message.event === "caught_up") {
        const mark = JSON.parse(message.data);
        transcript.after(() => {
          if (!caughtUp) {
            caughtUp = true;
            firstSeq = mark.first_seq;
            earlier.hidden = !mark.earlier;
            document.documentElement.dataset.transcript = "shown";
            performance.mark("console:transcript-shown");
          }
        });
      } else if (message.event === "gone") {
        // `{}`: deleted; `{"reason": "access"}`: a reload's rules no longer let us watch it.
        const why = JSON.parse(message.data || "{}");
        announce(why.reason === "access" ? "You may no longer watch this session" : "This session was deleted");
      } else {
        transcript.push(JSON.parse(message.data));
      }
    },
    onState(state) {
      log.dataset.connection = state;
      connection.textContent = state === "live" ? "live" : state === "reconnecting" ? "reconnecting…" : "ended";
    },
    onError(error) {
      announce(`Transcript unavailable: ${error.message}`);
    },
  });

  earlier.addEventListener("click", () => {
    earlier.disabled = true;
    loadEarlier(base, firstSeq, answer, log, (mark) => {
      if (mark) firstSeq = mark.first_seq;
      earlier.hidden = !mark || !mark.earlier;
      earlier.disabled = false;
    });
  });

  const el = h(
    "article.session",
    null,
    h("header.session-head", null, title, dl, connection),
    earlier,
    log,
    prompt.form,
  );
  return { el, view: "session", cleanup: () => stream.close(), focus: () => prompt.focus() };
}

/** The `TAIL_TURNS` turns before `firstSeq` (a finite stream), rendered apart and put
 * before what is shown; `done` gets the page's `caught_up` (where it starts, and whether
 * there is more before it). */
function loadEarlier(base, firstSeq, answer, log, done) {
  const holder = h("div");
  const older = new Transcript(holder, { answer });
  let mark = null;
  announce("Loading earlier turns");
  new Stream(`${base}/events?tail_turns=${TAIL_TURNS}&through=${firstSeq - 1}`, {
    onEvent(message) {
      if (message.event === "caught_up") mark = JSON.parse(message.data);
      else if (message.event !== "gone") older.push(JSON.parse(message.data));
    },
    onEnd() {
      older.after(() => {
        log.prepend(...holder.childNodes);
        announce("Earlier turns loaded");
        done(mark);
      });
    },
  }, { finite: true });
}
