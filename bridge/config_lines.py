"""Where each key of a TOML file is: the line `check-config` names beside a `$.path`.

The stdlib's `tomllib` gives values, never positions. Rather than a second TOML library
(tomlkit keeps comments and layout for editing, but gives no line numbers either), this
is a small scanner run over a document `tomllib` has already accepted: it follows table
headers (`[a.b]`, `[[a.b]]` with their element counts), dotted and quoted keys, inline
tables and arrays (one element each), and steps over strings of every kind (the
multi-line ones are where a naive line scan goes wrong) and comments. It never
raises: on text it does not follow, it keeps what it has found so far, and a path it
did not find takes the line of its nearest ancestor (`line_of`).

Paths are written as the config's problems write them: `$.routes.demo.back.kind`,
`$.routes.c.options[1].id`.
"""

from __future__ import annotations

import re
import tomllib

__all__ = ["key_lines", "line_of", "render_path"]

PathKey = tuple[str | int, ...]
_BARE = re.compile(r"[A-Za-z0-9_-]+")
_SCALAR_END = re.compile(r"[,\]}\n#]")
_MAX_DEPTH = 64  # nesting deeper than this is not followed (the config refuses it anyway)


def render_path(path: PathKey) -> str:
    """`("routes", "c", "options", 1)` → `$.routes.c.options[1]`."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def line_of(lines: dict[str, int], path: str) -> int | None:
    """The line of `path`, else of its nearest ancestor found in the file; None if none is."""
    while path and path != "$":
        if path in lines:
            return lines[path]
        cut = max(path.rfind("."), path.rfind("["))
        if cut <= 0:
            return None
        path = path[:cut]
    return None


def key_lines(text: str) -> dict[str, int]:
    """Every key, table and array element of `text` (valid TOML) by its `$.path`: its line (1-based)."""
    scanner = _Scanner(text)
    try:
        scanner.document()
    except (IndexError, ValueError, RecursionError):  # text it does not follow: keep what was found
        pass
    return scanner.lines


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text.replace("\r\n", "\n")
        self.pos = 0
        self.line = 1
        self.lines: dict[str, int] = {}
        self.table: PathKey = ()
        self.last_index: dict[PathKey, int] = {}  # each array of tables: its last element

    def _record(self, path: PathKey) -> None:
        self.lines.setdefault(render_path(path), self.line)

    def _advance_to(self, end: int) -> None:
        self.line += self.text.count("\n", self.pos, end)
        self.pos = end

    def _skip(self, *, newlines: bool) -> None:
        """Spaces, tabs and comments; and newlines too when `newlines`."""
        text = self.text
        while self.pos < len(text):
            c = text[self.pos]
            if c in " \t":
                self.pos += 1
            elif c == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            elif c == "\n" and newlines:
                self.pos += 1
                self.line += 1
            else:
                return

    def document(self) -> None:
        text = self.text
        while True:
            self._skip(newlines=True)
            if self.pos >= len(text):
                return
            start = self.pos
            if text.startswith("[[", self.pos):
                self.pos += 2
                self._header(self._key(), array=True)
            elif text[self.pos] == "[":
                self.pos += 1
                self._header(self._key(), array=False)
            else:
                self._key_value(self.table, depth=0)
            if self.pos == start:  # no progress: text this scanner does not follow
                return

    def _header(self, keys: list[str], *, array: bool) -> None:
        resolved: list[str | int] = []
        for i, key in enumerate(keys):
            resolved.append(key)
            if array and i == len(keys) - 1:
                break
            index = self.last_index.get(tuple(resolved))  # a parent that is an array of tables:
            if index is not None:  # its last element
                resolved.append(index)
        if array:
            table = tuple(resolved)
            self._record(table)
            index = self.last_index.get(table, -1) + 1
            self.last_index[table] = index
            self.table = (*table, index)
        else:
            self.table = tuple(resolved)
        self._record(self.table)
        end = self.text.find("\n", self.pos)
        self.pos = len(self.text) if end < 0 else end

    def _key(self) -> list[str]:
        """A dotted key: bare, "basic" or 'literal' parts."""
        keys: list[str] = []
        text = self.text
        while True:
            self._skip(newlines=False)
            c = text[self.pos]
            if c == '"':
                end = self._basic_end(self.pos + 1)
                keys.append(tomllib.loads(f"k = {text[self.pos:end]}")["k"])
                self.pos = end
            elif c == "'":
                end = text.index("'", self.pos + 1) + 1
                keys.append(text[self.pos + 1 : end - 1])
                self.pos = end
            else:
                m = _BARE.match(text, self.pos)
                if m is None:
                    raise ValueError("not a key")
                keys.append(m.group())
                self.pos = m.end()
            self._skip(newlines=False)
            if text.startswith(".", self.pos):
                self.pos += 1
                continue
            return keys

    def _key_value(self, table: PathKey, *, depth: int) -> None:
        keys = self._key()
        path = (*table, *keys)
        for i in range(len(table) + 1, len(path) + 1):
            self._record(path[:i])
        self._skip(newlines=False)
        if not self.text.startswith("=", self.pos):
            raise ValueError("no '='")
        self.pos += 1
        self._skip(newlines=False)
        self._value(path, depth=depth)

    def _basic_end(self, pos: int) -> int:
        """Just past the closing quote of a one-line basic string whose body starts at `pos`."""
        text = self.text
        while text[pos] != '"':
            pos += 2 if text[pos] == "\\" else 1
        return pos + 1

    def _value(self, path: PathKey, *, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise ValueError("too deep")
        text = self.text
        c = text[self.pos]
        if text.startswith('"""', self.pos) or text.startswith("'''", self.pos):
            quote = text[self.pos : self.pos + 3]
            pos = self.pos + 3
            while not text.startswith(quote, pos):
                pos += 2 if quote == '"""' and text[pos] == "\\" else 1
            pos += 3
            while pos < len(text) and text[pos] == quote[0] and pos - self.pos < 8:  # up to two more quotes close it
                pos += 1
            self._advance_to(pos)
        elif c == '"':
            self.pos = self._basic_end(self.pos + 1)
        elif c == "'":
            self.pos = text.index("'", self.pos + 1) + 1
        elif c == "[":
            self.pos += 1
            index = 0
            while True:
                self._skip(newlines=True)
                if text[self.pos] == "]":
                    self.pos += 1
                    return
                self._record((*path, index))
                self._value((*path, index), depth=depth + 1)
                index += 1
                self._skip(newlines=True)
                if text[self.pos] == ",":
                    self.pos += 1
        elif c == "{":
            self.pos += 1
            while True:
                self._skip(newlines=False)
                if text[self.pos] == "}":
                    self.pos += 1
                    return
                self._key_value(path, depth=depth + 1)
                self._skip(newlines=False)
                if text[self.pos] == ",":
                    self.pos += 1
        else:
            m = _SCALAR_END.search(text, self.pos)
            end = len(text) if m is None else m.start()
            if end == self.pos:
                raise ValueError("no value")
            self.pos = end
