"""Newline-delimited JSON framing (ACP and MCP stdio), bounded, sans-I/O.

`LineReader.feed(data)` returns the complete lines found so far; a line longer than
`max_frame_bytes` is dropped (up to its newline) and reported as `Oversized` in its
place, so the connection can answer with an error and keep going (DESIGN.md,
complaint 7). `feed_eof()` returns a last line that had no newline.

Past the bound nothing of the frame is kept but its first `HEAD_BYTES` (`Oversized.head`,
enough to read the JSON-RPC id or method a peer put first), so memory stays bounded
even for a line that never ends; `overflowing` is that frame while its newline has
not come yet, so a reader can act before it ends (or in case it never does).
"""

from __future__ import annotations

__all__ = ["HEAD_BYTES", "LineReader", "Oversized"]

HEAD_BYTES = 4096


class Oversized:
    __slots__ = ("size", "head")

    def __init__(self, size: int, head: bytes = b"") -> None:
        self.size = size  # bytes seen before the frame was dropped (at least)
        self.head = head  # its first bytes, at most HEAD_BYTES

    def __repr__(self) -> str:
        return f"Oversized({self.size})"


class LineReader:
    __slots__ = ("max_frame_bytes", "_buf", "_skipping", "_head")

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._skipping = 0  # >0: inside an oversized frame, this many bytes dropped so far
        self._head = b""  # the first bytes of that frame

    @property
    def overflowing(self) -> Oversized | None:
        """The oversized frame being dropped now, its newline not seen yet (else None)."""
        return Oversized(self._skipping, self._head) if self._skipping else None

    def feed(self, data: bytes) -> list[bytes | Oversized]:
        out: list[bytes | Oversized] = []
        if self._skipping:
            nl = data.find(b"\n")
            if nl < 0:
                self._skipping += len(data)
                return out
            out.append(Oversized(self._skipping + nl, self._head))
            self._skipping = 0
            data = data[nl + 1 :]
        buf = self._buf
        buf += data
        if b"\n" not in data:
            if len(buf) > self.max_frame_bytes:
                self._skipping = len(buf)
                self._head = bytes(buf[:HEAD_BYTES])
                buf.clear()
            return out
        lines = buf.split(b"\n")
        tail = lines.pop()
        for line in lines:
            if len(line) > self.max_frame_bytes:
                out.append(Oversized(len(line), bytes(line[:HEAD_BYTES])))
            elif line.strip():
                out.append(bytes(line))
        buf.clear()
        if len(tail) > self.max_frame_bytes:
            self._skipping = len(tail)
            self._head = bytes(tail[:HEAD_BYTES])
        else:
            buf += tail
        return out

    def feed_eof(self) -> list[bytes | Oversized]:
        if self._skipping:
            size, self._skipping = self._skipping, 0
            return [Oversized(size, self._head)]
        rest = bytes(self._buf).strip()
        self._buf.clear()
        return [rest] if rest else []
