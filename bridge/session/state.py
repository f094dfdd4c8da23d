"""Typed per-front state kept with a session.

A front keeps what it must remember about a session (the A2A front its context's side
sessions and the task waiting for input, the chat front its intent and headless runs)
as a `FrontState`: a msgspec Struct that names its `key`. A live session decodes it
once, on first use (`Session.front_state(kind)`), hands the same object to every
caller, and the journal writes it back to `SessionRecord.states[key]` whenever its
encoding changed since it was last stored (bridge/session/journal.py): one store row
per front and session, never rewritten when nothing changed. What grows with a
session's life does not belong here: A2A tasks are rows of their own
(bridge/store/base.py `TaskRecord`).

Fields at their default are omitted, so a state that was never changed stores `{}`.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, TypeVar

import msgspec

__all__ = ["FrontState", "decode_front_state", "encode_front_state", "load_front_state", "stored_front_state"]

log = logging.getLogger("bridge.session")

_enc = msgspec.json.Encoder()


class FrontState(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Base of a front's typed state; subclasses set `key`."""

    key: ClassVar[str]


S = TypeVar("S", bound=FrontState)


def load_front_state(states: dict[str, Any], kind: type[S]) -> tuple[S | None, bool]:
    """`kind` as stored in `states` (None when the session has none: never written by
    its front), and whether it may be written back.

    A stored state that does not decode (a record from another version, or edited by
    hand) reads as empty and must not be written back: that would erase what the
    record holds for one bad entry.
    """
    raw = states.get(kind.key)
    if raw is None:
        return None, True
    try:
        return msgspec.convert(raw, kind, strict=False), True
    except msgspec.ValidationError as exc:
        log.warning("a session record's %s state does not decode (%s); read as empty and kept as stored", kind.__name__, exc)
        return kind(), False


def stored_front_state(states: dict[str, Any], kind: type[S]) -> S | None:
    """`kind` as stored in `states` (a `SessionRecord.states`), or None when it has none."""
    return load_front_state(states, kind)[0]


def decode_front_state(states: dict[str, Any], kind: type[S]) -> S:
    """`kind` from `states`, or a new empty one."""
    state = stored_front_state(states, kind)
    return state if state is not None else kind()


def encode_front_state(state: FrontState) -> tuple[dict[str, Any], bytes]:
    """`state` as the builtins `SessionRecord.states[key]` holds, and their JSON (to
    tell whether it changed since it was stored)."""
    raw: dict[str, Any] = msgspec.to_builtins(state)
    return raw, _enc.encode(raw)
