"""Several daemons, one service: who runs a session's live turn, and how the others reach it.

A *cluster* is every `agent-bridge serve` sharing one PostgreSQL store (issue 17). Each
daemon process is an *instance*, named by its store's owner id. The store is shared,
so any instance reads any session, turn, task or event. What cannot be shared is a live
turn and its back (an ACP agent process, an open A2A stream): each session's live side
runs on the one instance holding its *lease*, a row in the store renewed every third
of `[cluster] lease_ttl_s`. Another instance that is asked about the session:

- reads what is stored (history, tasks, listings) as it would its own;
- follows its live events with a `Watch`: the owner's store writes notify every instance
  (PostgreSQL `NOTIFY` in the write's transaction), and a follower reads the new batches
  from the event table, in order, from the last sequence number it delivered;
- forwards every command (`Command`: a prompt, an answer, a cancel, an option, the
  front states it changed) to the owner, which runs it on its live session and
  answers with a `Reply`.

An instance that stops renewing (killed, cut off) loses its leases after the TTL; the
others then close its running turns as interrupted (the store's `close_cut_turns`:
their owner is gone) and the next command for one of its sessions takes the lease.

`SoloCluster` is one instance alone (SQLite and memory stores): every lease is its own
and nothing is forwarded. `MemoryCluster` (bridge/cluster/memory.py) is several
instances in one process for tests; `PgCluster` (bridge/cluster/pg.py) the real one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal, Protocol

import msgspec
import trio

from bridge.core.identity import Identity
from bridge.core.content import ContentBlock
from bridge.core.events import CommandInfo, ConfigOption
from bridge.errors import BackUnavailable, BridgeError
from bridge.store import TaskRecord, TurnRecord

__all__ = [
    "AnswerCmd",
    "CancelCmd",
    "Cluster",
    "Command",
    "CommandHandler",
    "DescribeCmd",
    "FlushCmd",
    "Moved",
    "NotifiedWatch",
    "OptionCmd",
    "OwnerGone",
    "PromptCmd",
    "PutCmd",
    "Reply",
    "SoloCluster",
    "Watch",
    "WatchCmd",
    "Watches",
    "decode_command",
    "decode_reply",
    "encode",
    "error_of",
    "reply_error",
]


class _Cmd(msgspec.Struct, tag_field="op", kw_only=True):
    session_id: str
    origin: str = ""  # the instance that forwarded it (set by `Cluster.forward`)


class PromptCmd(_Cmd, tag="prompt"):
    """`Session.start_turn` on the owner, with the turn id the follower chose."""

    turn_id: str
    content: list[ContentBlock]
    message_id: str | None = None
    meta: dict[str, Any] | None = None
    # Put in the turn's record as it starts (`TurnRecord.meta`: a headless chat run's options).
    record_meta: dict[str, Any] = {}
    # Who asked and through which front: the owner counts the turn against `[limits]`.
    identity: Identity | None = None
    front: str = ""


class AnswerCmd(_Cmd, tag="answer"):
    """`Session.answer` on the owner."""

    question_id: str
    selected: list[str] | None = None
    text: str | None = None
    values: dict[str, Any] | None = None
    cancelled: bool = False
    by: Literal["user", "front"] = "user"


class CancelCmd(_Cmd, tag="cancel"):
    """`Session.cancel` on the owner (`Reply.value`: whether a turn was cancelled)."""


class OptionCmd(_Cmd, tag="option"):
    """`Session.set_option` on the owner (`Reply.options`: the options after)."""

    option_id: str
    value: str


class PutCmd(_Cmd, tag="put"):
    """What a front on a follower changed: front states (by key, JSON-able builtins,
    replacing the owner's), task records to stage; then the owner saves the record."""

    states: dict[str, dict[str, Any]] = {}
    tasks: list[TaskRecord] = []


class FlushCmd(_Cmd, tag="flush"):
    """`Session.flush` on the owner: its pending events and turn records stored now."""


class WatchCmd(_Cmd, tag="watch"):
    """A follower starts (`on`) or stops watching the session live: while any does, the
    owner flushes its events at once instead of every `flush_interval_s`."""

    on: bool = True


class DescribeCmd(_Cmd, tag="describe"):
    """What only the live session knows (`Reply.busy`, `commands`, `options`)."""


Command = PromptCmd | AnswerCmd | CancelCmd | OptionCmd | PutCmd | FlushCmd | WatchCmd | DescribeCmd


class Reply(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The owner's answer to a command. `error`: a `bridge.errors` class name (or
    "Moved": this instance does not hold the session's lease), with `message`."""

    error: str | None = None
    message: str | None = None
    turn: TurnRecord | None = None  # PromptCmd: the turn's record as started
    value: bool | None = None  # CancelCmd
    busy: bool | None = None  # DescribeCmd
    commands: list[CommandInfo] | None = None
    options: list[ConfigOption] | None = None


class Moved(BridgeError):
    """The instance asked no longer holds the session's lease: ask again who does."""


class OwnerGone(BackUnavailable):
    """The owning instance did not answer in `[cluster] forward_timeout_s`, or is gone."""


_enc = msgspec.json.Encoder()
_cmd_dec = msgspec.json.Decoder(Command)
_reply_dec = msgspec.json.Decoder(Reply)


def encode(value: Command | Reply) -> bytes:
    return _enc.encode(value)


def decode_command(data: bytes) -> Command:
    """A command off the wire; `msgspec.ValidationError`/`DecodeError` when it is not one."""
    return _cmd_dec.decode(data)


def decode_reply(data: bytes) -> Reply:
    return _reply_dec.decode(data)


def reply_error(exc: BaseException) -> Reply:
    """How the owner answers a command that raised (a bug becomes InternalError)."""
    from bridge import errors

    name = type(exc).__name__
    if isinstance(exc, BridgeError) and (name == "Moved" or getattr(errors, name, None) is type(exc)):
        return Reply(error=name, message=exc.message)
    if isinstance(exc, BridgeError):  # a subclass of ours outside the table: its nearest listed base
        for base in type(exc).__mro__:
            if getattr(errors, base.__name__, None) is base:
                return Reply(error=base.__name__, message=exc.message)
    return Reply(error="InternalError", message=f"the instance running this session failed ({name})")


def error_of(reply: Reply) -> BridgeError | None:
    """The error a reply carries, as the class the owner raised; None on success."""
    from bridge import errors

    if reply.error is None:
        return None
    if reply.error == "Moved":
        return Moved(reply.message or "moved")
    cls = getattr(errors, reply.error, None)
    if not (isinstance(cls, type) and issubclass(cls, BridgeError)):
        cls = errors.InternalError
    return cls(reply.message or reply.error)


CommandHandler = Callable[[Command], Awaitable[Reply]]


class Watch(Protocol):
    """Notifications that a session's stored events grew. Open it before the first read."""

    async def wait_beyond(self, seq: int, *, timeout_s: float) -> None:
        """Return once a notification said the stored `last_seq` is past `seq` (at once if
        one did since the watch opened), or after `timeout_s` (a reader then reads anyway:
        a notification may have been lost with a connection)."""

    def close(self) -> None: ...


class Cluster(Protocol):
    instance_id: str
    solo: bool  # one instance alone: no leases, nothing forwarded, nothing watched

    async def run(self, handler: CommandHandler, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve commands forwarded here with `handler`, renew this instance and its
        leases, close the turns of instances gone past their TTL; until cancelled."""

    async def acquire(self, session_id: str) -> str | None:
        """Take the session's lease if it is free, expired or ours: None. Otherwise the
        instance id of its live owner."""

    async def release(self, session_id: str) -> None:
        """Let the lease go (the session closed here); no error if it was not ours."""

    async def forward(self, owner: str, command: Command) -> Reply:
        """Send `command` to `owner` and wait for its reply, at most `forward_timeout_s`;
        `OwnerGone` when it does not answer."""

    def watch(self, session_id: str) -> Watch: ...

    # Set by the session manager: called (no await) with a session id whose lease this
    # instance found taken by another (it stopped renewing in time): close it here.
    on_lost: Callable[[str], None]

    def stats(self) -> dict[str, int]:
        """For /metrics: `leases` held, `forwarded` and `served` commands, `forward_failures`."""


class NotifiedWatch:
    """A `Watch` woken by notifications (`_notify`) an instance hands it; `_kick` wakes
    its reader whatever it waits for (notifications may have been lost)."""

    def __init__(self, session_id: str, on_close: Callable[[NotifiedWatch], None]) -> None:
        self.session_id = session_id
        self.notified = 0  # the highest `last_seq` notified
        self._kicked = False
        self._event = trio.Event()
        self._on_close = on_close

    def _notify(self, last_seq: int) -> None:
        if last_seq > self.notified:
            self.notified = last_seq
            self._event.set()

    def _kick(self) -> None:
        self._kicked = True
        self._event.set()

    async def wait_beyond(self, seq: int, *, timeout_s: float) -> None:
        with trio.move_on_after(timeout_s):
            while self.notified <= seq and not self._kicked:
                self._event = trio.Event()
                await self._event.wait()
        self._kicked = False

    def close(self) -> None:
        self._on_close(self)


class Watches:
    """An instance's open watches by session: what a notification wakes."""

    def __init__(self) -> None:
        self._by_session: dict[str, set[NotifiedWatch]] = {}

    def open(self, session_id: str) -> NotifiedWatch:
        watch = NotifiedWatch(session_id, self._close)
        self._by_session.setdefault(session_id, set()).add(watch)
        return watch

    def _close(self, watch: NotifiedWatch) -> None:
        watches = self._by_session.get(watch.session_id)
        if watches is not None:
            watches.discard(watch)
            if not watches:
                del self._by_session[watch.session_id]

    def notify(self, session_id: str, last_seq: int) -> None:
        """The session's stored events reach `last_seq` (a dict lookup when nobody watches it)."""
        for watch in list(self._by_session.get(session_id, ())):
            watch._notify(last_seq)

    def kick_all(self) -> None:
        for watches in list(self._by_session.values()):
            for watch in list(watches):
                watch._kick()


class _NoWatch:
    async def wait_beyond(self, seq: int, *, timeout_s: float) -> None:
        await trio.sleep(timeout_s)

    def close(self) -> None:
        pass


class SoloCluster:
    """One instance alone: every session is its own."""

    solo = True

    def __init__(self, instance_id: str = "solo") -> None:
        self.instance_id = instance_id
        self.on_lost: Callable[[str], None] = lambda sid: None

    async def run(self, handler: CommandHandler, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()

    async def acquire(self, session_id: str) -> str | None:
        return None

    async def release(self, session_id: str) -> None:
        pass

    async def forward(self, owner: str, command: Command) -> Reply:
        raise OwnerGone(f"no instance {owner!r} in a single-process daemon")

    def watch(self, session_id: str) -> Watch:
        return _NoWatch()

    def stats(self) -> dict[str, int]:
        return {}
