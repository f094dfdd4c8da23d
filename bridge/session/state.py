"""Typed per-front state kept with a session's record.

A front keeps what it must remember about a session (the A2A front its tasks and side
sessions, the chat front its headless runs) as a `FrontState`: a msgspec Struct that
names where it lives in `SessionRecord.meta` (bridge/store/base.py). A live session
decodes it once, on first use (`Session.front_state(kind)`), hands the same object to
every caller, and encodes it back into the record whenever the record is written
(`Session.flush`, `Session.save_record`), so the store keeps `meta` as plain JSON and
the state survives a daemon restart.

Where it lives: with `meta_key` set, the whole Struct is `meta[meta_key]`; with
`meta_key = None` its fields are top-level keys of `meta` (for state whose keys are
already on disk at the top level, or read there by someone else). Fields at their
default are omitted, so a state that was never changed writes nothing but its key.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, TypeVar

import msgspec

__all__ = ["FrontState", "decode_front_state", "encode_front_state", "load_front_state", "stored_front_state"]

log = logging.getLogger("bridge.session")


class FrontState(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Base of a front's typed state; subclasses set `meta_key` (or None: flat)."""

    meta_key: ClassVar[str | None]


S = TypeVar("S", bound=FrontState)


def load_front_state(meta: dict[str, Any], kind: type[S]) -> tuple[S | None, bool]:
    """`kind` as stored in `meta` (None when the record has none: never written by its
    front), and whether it may be written back.

    A stored state that does not decode (a record from another version, or edited by
    hand) reads as empty and must not be written back: that would erase what the
    record holds (every task of an A2A context) for one bad entry.
    """
    key = kind.meta_key
    if key is not None:
        raw = meta.get(key)
        if raw is None:
            return None, True
    else:
        raw = {name: meta[name] for name in kind.__struct_fields__ if name in meta}
        if not raw:
            return None, True
    try:
        return msgspec.convert(raw, kind, strict=False), True
    except msgspec.ValidationError as exc:
        log.warning("a session record's %s state does not decode (%s); read as empty and kept as stored", kind.__name__, exc)
        return kind(), False


def stored_front_state(meta: dict[str, Any], kind: type[S]) -> S | None:
    """`kind` as stored in `meta`, or None when the record has none (never written by its front)."""
    return load_front_state(meta, kind)[0]


def decode_front_state(meta: dict[str, Any], kind: type[S]) -> S:
    """`kind` from `meta`, or a new empty one."""
    state = stored_front_state(meta, kind)
    return state if state is not None else kind()


def encode_front_state(meta: dict[str, Any], state: FrontState) -> None:
    """Write `state` into `meta`, where `stored_front_state` reads it back."""
    raw = msgspec.to_builtins(state)
    key = state.meta_key
    if key is not None:
        meta[key] = raw
        return
    for name in state.__struct_fields__:
        if name in raw:
            meta[name] = raw[name]
        else:
            meta.pop(name, None)
