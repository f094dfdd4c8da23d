"""The pieces of an A2A task the projector builds (bridge/codecs/a2a_task.py), sans-I/O:
timestamps, the state a turn ends in, an artifact and a history entry as they grow.
"""

from __future__ import annotations

import math
import time
from typing import Any

from bridge.codecs.a2a import META_KEY
from bridge.core.events import StopReason
from bridge.schema import a2a as s

__all__ = ["AUTH_ERROR_KIND", "Artifact", "Entry", "final_state", "iso_time", "tag"]

AUTH_ERROR_KIND = "BackAuthRequired"  # TurnError.kind of a back that needs the user to sign in
_S = s.TaskState


_second: list[Any] = [None, ""]  # (whole second, its "YYYY-MM-DDTHH:MM:SS"): most stamps share one


def iso_time(ts: float) -> str:
    """ProtoJSON timestamp (RFC 3339, UTC, `Z`), to the millisecond."""
    whole = math.floor(ts)
    if _second[0] != whole:
        _second[0], _second[1] = whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    return f"{_second[1]}.{min(int((ts - whole) * 1000), 999):03d}Z"


def final_state(stop: StopReason | str, error_kind: str | None = None) -> tuple[str, str | None]:
    """(A2A state, the stop reason to note in metadata) for how a turn ended
    (ACP schema `StopReason` → a2a.proto `TaskState`)."""
    stop = StopReason(stop)
    if stop is StopReason.END_TURN:
        return _S.COMPLETED, None
    if stop in (StopReason.MAX_TOKENS, StopReason.MAX_TURN_REQUESTS):
        return _S.COMPLETED, stop.value  # no exact state: completed, and says why
    if stop is StopReason.REFUSAL:
        return _S.REJECTED, None
    if stop is StopReason.CANCELLED:
        return _S.CANCELED, None
    if stop is StopReason.INPUT_REQUIRED:
        return _S.INPUT_REQUIRED, None
    return (_S.AUTH_REQUIRED if error_kind == AUTH_ERROR_KIND else _S.FAILED), None


class Artifact:
    __slots__ = ("id", "name", "parts", "open")

    def __init__(self, aid: str, name: str | None) -> None:
        self.id = aid
        self.name = name
        self.parts: list[s.Part | list[str]] = []  # a list[str] is a run of plain text
        self.open = True

    def add(self, part: s.Part) -> None:
        if part.text is not None and part.metadata is None and part.media_type is None:
            if self.parts and isinstance(self.parts[-1], list):
                self.parts[-1].append(part.text)
            else:
                self.parts.append([part.text])
        else:
            self.parts.append(part)

    def build(self) -> s.Artifact:
        parts = [s.Part(text="".join(p)) if isinstance(p, list) else p for p in self.parts]
        return s.Artifact(artifact_id=self.id, name=self.name, parts=parts or [s.Part(text="")])


class Entry:
    """A history message: text runs (coalesced chunks) and other parts."""

    __slots__ = ("message_id", "role", "texts", "parts", "metadata", "refs", "extensions")

    def __init__(self, message_id: str, role: str, metadata: dict[str, Any] | None = None) -> None:
        self.message_id = message_id
        self.role = role
        self.texts: list[str] = []
        self.parts: list[s.Part] = []
        self.metadata = metadata
        self.refs: list[str] | None = None
        self.extensions: list[str] | None = None

    @classmethod
    def sent(cls, msg: s.Message) -> Entry:
        """The client's message as it sent it."""
        entry = cls(msg.message_id, s.ROLE_USER, msg.metadata)
        entry.parts, entry.refs, entry.extensions = list(msg.parts), msg.reference_task_ids, msg.extensions
        return entry


def tag(kind: str, **more: Any) -> dict[str, Any]:
    return {META_KEY: {"kind": kind, **{k: v for k, v in more.items() if v is not None}}}
