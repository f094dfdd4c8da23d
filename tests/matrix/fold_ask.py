"""What `agent-bridge ask` showed on a terminal, folded into a protocol-free `Seen`.

The matrix runs `ask` with stdout on a pseudo-terminal (so it styles what it prints, as
for a user: thoughts dim, plans cyan, tool calls yellow, questions bold) and stderr on a
pipe. bridge/render.py's lines:

    <text>  \\e[2m<thought>\\e[0m         a run of chunks ("  ↳ " first: a sub-agent's)
    \\e[36mplan: \\e[0m✓ <entry>  … <entry>
    \\e[33m[  ↳ ]<status> <title>\\e[0m (<kind>)      a tool call starts
    \\e[33m[  ↳ ]<status> <title>\\e[0m <text ⏎ …>    it is updated
    \\e[1m? <prompt>\\e[0m then "  N. <label>[ — description]"
    \\e[2musage: …\\e[0m    \\e[31merror: <message>\\e[0m    \\e[2m[<stop reason>]\\e[0m

A status line (progress) goes to stderr, dim, never into the answer; stderr's log
lines and `session: ID` are not shown to the user as such. A traceback on stderr is
a failure the user sees. The live status line below the reply (bridge/status_line.py:
drawn and erased between a cursor save and restore) is taken out first, as it leaves
nothing on the screen; a question's header shows as `[header] ` before its prompt.
"""

from __future__ import annotations

import re

import msgspec

from tests.matrix.fold import Tools
from tests.matrix.kinds import Asked, Option, Seen

__all__ = ["fold_ask"]

_STYLED = re.compile(r"\x1b\[(\d+)m(.*?)\x1b\[0m", re.S)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SYMBOL = {"…": "pending", "▸": "in_progress", "✓": "completed", "✗": "failed"}
_STOP = {"failed": "error"}
_CHILD = "  ↳ "
_PLACEHOLDER = re.compile(r"\[(image|link|resource_link|resource|file)\b[^\]\n]*\]")
_LIVE_STATUS = re.compile(r"(?:\x1bD\x1bM)?\x1b7.*?\x1b8", re.S)
_HEADER = re.compile(r"^\[[^\]]*\] ")
_LOG = re.compile(r"^\d{4}-\d\d-\d\dT\S+ (DEBUG|INFO|WARNING|ERROR|CRITICAL) |^\{\"ts\"|^session: |^> ")


def _tool_line(tools: Tools, top: list[str], head: str, rest: str) -> None:
    child = head.startswith(_CHILD)
    sym, _, title = head.removeprefix(_CHILD).partition(" ")
    started = re.fullmatch(r" \((\w*)\)", rest)
    tool_id = f"{'child' if child else 'top'}:{title}"
    parent = top[-1] if child and top else None
    if not child and tool_id not in tools.order:
        top.append(tool_id)
    body = "" if started else _PLACEHOLDER.sub("", re.sub(r"\[diff [^\]]*\]", "", rest)).strip()
    tools.update(tool_id, title=title, status=_SYMBOL.get(sym, sym), kind=started.group(1) if started else None,
                 text=body or None, parent=parent)  # fmt: skip


def fold_ask(stdout: str, stderr: str) -> Seen:
    seen = Seen(stop="?")  # type: ignore[arg-type]
    tools, top = Tools(), []  # top: the top-level tool calls, the last is a child line's parent
    text: list[str] = []
    children: dict[str, str] = {}
    files: list[tuple[str, str]] = []
    asked: list[Asked] = []
    for line in _LIVE_STATUS.sub("", stdout).replace("\r\n", "\n").split("\n"):
        first = _STYLED.match(line)
        code, head, rest = (first.group(1), first.group(2), line[first.end() :]) if first else ("", "", line)
        if code == "36" and head.strip().endswith("plan:"):
            entries = [e.split(" ", 1) for e in rest.split("  ") if e]
            seen.plan = tuple((content, _SYMBOL.get(sym, sym)) for sym, content in entries)
        elif code == "33":
            _tool_line(tools, top, head, rest)
        elif code == "1" and head.startswith("? "):
            asked.append(Asked(kind="choice", prompt=_HEADER.sub("", head[2:])))
        elif not first and asked and (m := re.fullmatch(r"  (\d+)\. (.*?)(?: — .*)?", line)):
            q = asked[-1]
            asked[-1] = msgspec.structs.replace(q, options=(*q.options, Option(m.group(1), m.group(2))))
        elif code == "2" and head.startswith("usage: "):
            seen.usage = True
        elif code == "2" and head.startswith(("answer (", "commands: ", "options: ")):
            continue
        elif code == "2" and re.fullmatch(r"\[\w+\]", head):
            seen.stop = _STOP.get(head[1:-1], head[1:-1])  # type: ignore[assignment]
        elif code == "31" and head.startswith("error: "):
            seen.error = head.removeprefix("error: ")
        elif line:
            child = line.startswith(_CHILD)
            body = line.removeprefix(_CHILD)
            seen.thought += "".join(m.group(2) for m in _STYLED.finditer(body) if m.group(1) == "2")
            plain = _ANSI.sub("", _STYLED.sub(lambda m: "" if m.group(1) == "2" else m.group(2), body))
            for p in _PLACEHOLDER.finditer(plain):
                files.append(("link" if p.group(1) in ("link", "resource_link") else p.group(1), ""))
            plain = _PLACEHOLDER.sub("", plain)
            if child and plain:
                ref = tools.ref(top[-1]) if top else ""
                children[ref or ""] = children.get(ref or "", "") + plain
            elif plain:
                text.append(plain)
    for line in stderr.splitlines():
        if line.startswith("Traceback") or line.lstrip(" |+").startswith("Traceback"):
            seen.error = (seen.error or "") + "a traceback on stderr: " + stderr[-300:]
            break
        shown = _ANSI.sub("", line).strip()
        if shown and not _LOG.match(shown) and not line[:1].isspace():
            seen.progress += shown
    return msgspec.structs.replace(seen, text="\n".join(text), tools=tools.seen(), children=children, files=tuple(files), asked=tuple(asked))
