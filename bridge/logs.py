"""Logging: one line per event on stderr, as text or JSON, with ids and no secrets.

Every record may carry the worker of `serve --workers N` that wrote it, and the
session, route and turn it is about: explicitly with
`extra={"session": ..., "route": ..., "turn": ...}`, or from `log_ids`, a context
variable that the session sets in each turn's task (trio copies the context into
every task started from there, so a back's own log lines carry the ids too). With
tracing on (bridge/telemetry), a turn's lines also carry its `trace_id` and `span_id`
(the turn's span), so a log line leads to its trace.

`--log-format text` (default): `TIME LEVEL logger [worker= route= session= turn= trace_id= span_id=] message`.
Under systemd (`$JOURNAL_STREAM` names our stderr) the time is left to journald and
each line starts with its syslog priority `<N>`, which journald turns into the
entry's PRIORITY (sd-daemon(3)). `--log-format json`: one object per line, keys
`ts level logger msg` plus `worker route session turn trace_id span_id` when known and `exc` for a traceback.

Redaction (STYLE.md rule 21): every value registered with `add_secret` (tokens read
from the environment, files and systemd credentials) and anything that looks like a
credential (`Bearer xyz`, `token=xyz`, `"api_key": "xyz"`) is replaced by `***` in
the final line, traceback included. This module imports only the standard library:
`agent-bridge acp` loads it on start.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import sys
import time
from typing import Any

__all__ = ["REDACTED", "add_secret", "log_ids", "redact", "set_log_ids", "setup"]

REDACTED = "***"
_IDS = ("worker", "route", "session", "turn", "trace_id", "span_id")

# The ids of what the current task is working on (see the module docstring).
log_ids: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("agent_bridge_log_ids", default=None)

_secrets: set[str] = set()
# Credentials replaced as they rotate (an OAuth subject token read at each token request):
# the newest `_ROTATING_KEPT`, so a daemon up for months does not register every one it
# ever read (the pattern, and the time each line takes to redact, would grow without end).
_rotating: dict[str, None] = {}
_ROTATING_KEPT = 16
_secret_re: re.Pattern[str] | None = None
_MIN_SECRET = 6  # shorter values would redact ordinary words and numbers
_PATTERNS = re.compile(
    r"(?i)(\b(?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{6,}"
    r"|((?:authorization|x-api-key|api[_-]?key|token|secret|password|passwd)[\"']?\s*[:=]\s*[\"']?"
    r"(?:(?:bearer|basic|token)\s+)?)(?!\*\*\*)[^\s\"',;&]{4,}"
)


def set_log_ids(**ids: str | None) -> contextvars.Token[dict[str, str] | None]:
    """Add ids to the current task's log context (None leaves one out)."""
    merged = dict(log_ids.get() or {})
    merged.update({k: v for k, v in ids.items() if v is not None})
    return log_ids.set(merged)


def add_secret(value: str | None, *, rotating: bool = False) -> None:
    """Never print `value` (a token, a password) in a log line. `rotating`: one of a
    credential's successive values, of which only the newest few are kept."""
    global _secret_re
    if value is None:
        return
    value = value.strip()
    if len(value) < _MIN_SECRET or value in _secrets:
        return
    if rotating:
        if value in _rotating:
            return
        _rotating[value] = None
        while len(_rotating) > _ROTATING_KEPT:
            del _rotating[next(iter(_rotating))]
    else:
        _rotating.pop(value, None)
        _secrets.add(value)
    # Longest first, so a secret that contains another is replaced whole.
    _secret_re = re.compile("|".join(re.escape(s) for s in sorted({*_secrets, *_rotating}, key=len, reverse=True)))


def redact(text: str) -> str:
    if _secret_re is not None:
        text = _secret_re.sub(REDACTED, text)
    return _PATTERNS.sub(lambda m: (m.group(1) or m.group(2)) + REDACTED, text)


def _ids(record: logging.LogRecord) -> dict[str, str]:
    ctx = log_ids.get() or {}
    out: dict[str, str] = {}
    for key in _IDS:
        value = getattr(record, key, None) or ctx.get(key)
        if value:
            out[key] = str(value)
    return out


# syslog priorities (sd-daemon(3)): <3> error, <4> warning, <6> info, <7> debug.
_PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}


class TextFormatter(logging.Formatter):
    def __init__(self, *, journal: bool = False) -> None:
        super().__init__()
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        ids = _ids(record)
        where = (" [" + " ".join(f"{k}={v}" for k, v in ids.items()) + "]") if ids else ""
        text = f"{record.levelname} {record.name}{where}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        text = redact(text)
        if self.journal:
            prio = _PRIORITY.get(record.levelno, 6)
            # journald keeps one entry per line: continuation lines get the priority too.
            return "\n".join(f"<{prio}>{line}" for line in text.split("\n"))
        return f"{self.formatTime(record, '%Y-%m-%dT%H:%M:%S')}.{int(record.msecs):03d} {text}"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        out.update(_ids(record))
        if record.exc_info:
            out["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(out, ensure_ascii=False, default=str)


def _under_journald() -> bool:
    """True when stderr is the journal stream systemd connected (systemd.exec(5), $JOURNAL_STREAM)."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    dev, _, ino = stream.partition(":")
    if not (dev.isdigit() and ino.isdigit()):
        return False
    try:
        st = os.fstat(2)
    except OSError:
        return False
    return st.st_dev == int(dev) and st.st_ino == int(ino)


def setup(level: str, fmt: str = "text") -> None:
    """Log to stderr at `level` in `fmt` ("text" or "json"), replacing any earlier setup."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(journal=_under_journald()))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    # httpx logs every request's whole URL at INFO; a webhook's or a back's path and query
    # may carry a secret, so only its warnings pass (we log URLs as origins ourselves).
    logging.getLogger("httpx").setLevel(max(root.level, logging.WARNING))
