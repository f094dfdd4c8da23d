"""Canonical commands: what a front asks of a session (imperatives)."""

from __future__ import annotations

from typing import Any

import msgspec

from bridge.core.content import ContentBlock

__all__ = ["AnswerQuestion", "CancelTurn", "CloseSession", "Command", "SendPrompt", "SetOption"]


class _Command(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    pass


class SendPrompt(_Command):
    content: list[ContentBlock]


class CancelTurn(_Command):
    pass


class AnswerQuestion(_Command):
    """Answers the question `question_id`; `selected` holds option ids."""

    question_id: str
    selected: tuple[str, ...] = ()
    text: str | None = None
    values: dict[str, Any] | None = None
    cancelled: bool = False


class SetOption(_Command):
    option_id: str
    value: str


class CloseSession(_Command):
    pass


Command = SendPrompt | CancelTurn | AnswerQuestion | SetOption | CloseSession
