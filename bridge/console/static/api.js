// The console's only way to the daemon: its public HTTP APIs, with the bearer token.
//
// Tokens live in sessionStorage (this tab, this session), never in localStorage or a
// cookie. Streams are read with fetch + ReadableStream because EventSource cannot send
// an Authorization header; they resume with Last-Event-ID (the HTML "server-sent
// events" section: "last event ID string") after a drop.

const TOKEN_KEY = "agent-bridge.token";
const ADMIN_KEY = "agent-bridge.admin-token";

export class ApiError extends Error {
  constructor(status, detail) {
    super(detail || `HTTP ${status}`);
    this.status = status;
    this.detail = detail;
  }
}

export const tokens = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (value) => (value ? sessionStorage.setItem(TOKEN_KEY, value) : sessionStorage.removeItem(TOKEN_KEY)),
  admin: () => sessionStorage.getItem(ADMIN_KEY),
  setAdmin: (value) => (value ? sessionStorage.setItem(ADMIN_KEY, value) : sessionStorage.removeItem(ADMIN_KEY)),
};

/** Called with no argument when an /api/* answer is 401: the app shows the token form. */
let onUnauthorized = () => {};
export function setUnauthorizedHandler(fn) {
  onUnauthorized = fn;
}

function headers(extra, token = tokens.get()) {
  const out = { Accept: "application/json", ...extra };
  if (token) out.Authorization = `Bearer ${token}`;
  return out;
}

async function failure(response) {
  let detail = `HTTP ${response.status}`;
  try {
    const body = await response.json();
    if (body && typeof body.detail === "string") detail = body.detail;
  } catch {
    // not JSON: the status says enough
  }
  return new ApiError(response.status, detail);
}

/** JSON in, JSON out; an ApiError for any status other than 2xx. */
export async function api(path, { method = "GET", body, signal } = {}) {
  const init = { method, signal, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  if (response.status === 401) {
    onUnauthorized();
    throw await failure(response);
  }
  if (!response.ok) throw await failure(response);
  return response.status === 204 ? null : response.json();
}

export const enc = encodeURIComponent;

/** `/metrics` as text, with the admin token if one was given (it may answer 401). */
export async function metricsText(signal) {
  const response = await fetch("/metrics", { signal, headers: headers({ Accept: "text/plain" }, tokens.admin()) });
  if (!response.ok) throw await failure(response);
  return response.text();
}

/** Parse an SSE body incrementally (the HTML "event stream interpretation" rules). */
export class SseParser {
  constructor(onEvent) {
    this.onEvent = onEvent; // ({event, data, id}) for each dispatched event
    this.buffer = "";
    this.reset();
  }

  reset() {
    this.event = "";
    this.data = [];
    this.id = null;
    this.retry = null;
  }

  feed(text) {
    this.buffer += text;
    let start = 0;
    for (;;) {
      const nl = this.buffer.indexOf("\n", start);
      if (nl < 0) break;
      let line = this.buffer.slice(start, nl);
      if (line.endsWith("\r")) line = line.slice(0, -1);
      start = nl + 1;
      this.line(line);
    }
    this.buffer = this.buffer.slice(start);
  }

  line(line) {
    if (line === "") {
      if (this.data.length) this.onEvent({ event: this.event || "message", data: this.data.join("\n"), id: this.id });
      this.event = "";
      this.data = [];
      return;
    }
    if (line.startsWith(":")) return; // a comment: the server's heartbeat
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id") this.id = value;
    else if (field === "retry" && /^\d+$/.test(value)) this.retry = Number(value);
  }
}

/**
 * A server-sent event stream that reconnects until closed.
 *
 * handlers: onEvent({event, data, id}), onState("live"|"reconnecting"|"ended"),
 * onOpen(resumed: bool), onEnd() when the server ended a finite stream (`finite`).
 * `lastId` is sent as Last-Event-ID on every reconnect, so nothing is missed.
 */
export class Stream {
  constructor(url, handlers, { lastId = null, finite = false } = {}) {
    this.url = url;
    this.handlers = handlers;
    this.lastId = lastId;
    this.finite = finite;
    this.retryMs = 1000;
    this.controller = null;
    this.closed = false;
    this.attempt = 0;
    this.run();
  }

  close() {
    this.closed = true;
    if (this.controller) this.controller.abort();
  }

  async run() {
    while (!this.closed) {
      this.controller = new AbortController();
      let ended = false;
      try {
        const extra = { Accept: "text/event-stream" };
        if (this.lastId !== null) extra["Last-Event-ID"] = String(this.lastId);
        const response = await fetch(this.url, { headers: headers(extra), signal: this.controller.signal, cache: "no-store" });
        if (response.status === 401) {
          onUnauthorized();
          this.closed = true;
          break;
        }
        if (!response.ok) {
          const error = await failure(response);
          if (response.status === 404 || response.status === 400) {
            this.closed = true; // nothing to resume: the session is gone or the ask is wrong
            this.handlers.onError?.(error);
            break;
          }
          throw error;
        }
        this.handlers.onState?.("live");
        this.handlers.onOpen?.(this.attempt > 0);
        this.attempt = 0;
        ended = await this.read(response);
      } catch (error) {
        if (this.closed) break;
        this.handlers.onDrop?.(error);
      }
      if (this.closed || ended) break;
      this.attempt += 1;
      this.handlers.onState?.("reconnecting");
      const delay = Math.min(this.retryMs * Math.min(this.attempt, 10), 15000);
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
    this.handlers.onState?.("ended");
  }

  /** True if the stream ended as the server meant it (finite, or `gone`). */
  async read(response) {
    const parser = new SseParser((message) => {
      if (message.id !== null && message.id !== "") this.lastId = message.id;
      if (message.event === "gone") this.closed = true;
      this.handlers.onEvent(message);
    });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.feed(value);
      if (parser.retry !== null) this.retryMs = parser.retry;
      if (this.closed) {
        reader.cancel().catch(() => {});
        return true;
      }
    }
    if (this.finite) {
      this.closed = true;
      this.handlers.onEnd?.();
      return true;
    }
    return false;
  }
}
