"""Newline-delimited JSON framing (ACP and MCP stdio), bounded, sans-I/O.

`LineReader.feed(data)` returns the complete lines found so far; a line longer than
`max_frame_bytes` is dropped (up to its newline) and reported as `Oversized` in its
place, so the connection can answer with an error and keep going (DESIGN.md,
complaint 7). `feed_eof()` returns a last line that had no newline.
"""

from __future__ import annotations

__all__ = ["LineReader", "Oversized"]


class Oversized:
    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size  # bytes seen before the frame was dropped (at least)

    def __repr__(self) -> str:
        return f"Oversized({self.size})"


class LineReader:
    __slots__ = ("max_frame_bytes", "_buf", "_skipping")

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._skipping = 0  # >0: inside an oversized frame, this many bytes dropped so far

    def feed(self, data: bytes) -> list[bytes | Oversized]:
        out: list[bytes | Oversized] = []
        if self._skipping:
            nl = data.find(b"\n")
            if nl < 0:
                self._skipping += len(data)
                return out
            out.append(Oversized(self._skipping + nl))
            self._skipping = 0
            data = data[nl + 1 :]
        buf = self._buf
        buf += data
        if b"\n" not in data:
            if len(buf) > self.max_frame_bytes:
                self._skipping = len(buf)
                buf.clear()
            return out
        lines = buf.split(b"\n")
        tail = lines.pop()
        for line in lines:
            if len(line) > self.max_frame_bytes:
                out.append(Oversized(len(line)))
            elif line.strip():
                out.append(bytes(line))
        buf.clear()
        if len(tail) > self.max_frame_bytes:
            self._skipping = len(tail)
        else:
            buf += tail
        return out

    def feed_eof(self) -> list[bytes | Oversized]:
        if self._skipping:
            size, self._skipping = self._skipping, 0
            return [Oversized(size)]
        rest = bytes(self._buf).strip()
        self._buf.clear()
        return [rest] if rest else []
