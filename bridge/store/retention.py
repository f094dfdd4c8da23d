"""Retention: deleting the sessions nobody updated for a while, in bounded chunks.

`prune_older` is what `agent-bridge store prune --older-than` runs, and what the daemon
runs every `PASS_INTERVAL_S` when `[store] retention_days` is set (`prune_on_schedule`):
the sessions last updated before the cut-off, with no open turn, oldest first, are
deleted with their turns, tasks, states and events. `CHUNK` sessions go per
transaction, so a pass never holds SQLite's write lock long: the daemon's own flushes
and other processes sharing the file get it between chunks. `keep(session_id)` spares
what a caller still uses (the daemon's live sessions and those it is loading; a false
answer may hold the session back from loading until `release` hears it is gone); the
store checks each session again in the deleting transaction, so one that started a
turn since it was listed stays.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import trio

from bridge.errors import BridgeError
from bridge.store.base import Store

__all__ = ["CHUNK", "MAX_PER_PASS", "PASS_INTERVAL_S", "prune_older", "prune_on_schedule"]

log = logging.getLogger("bridge.store")

CHUNK = 8  # sessions deleted per transaction (a session of 5 000 turns takes ~50 ms)
MAX_PER_PASS = 10_000  # sessions one scheduled pass deletes at most; the next pass goes on
PASS_INTERVAL_S = 3600.0
_CATCH_UP_S = 60.0  # the pause before the next pass when one stopped at MAX_PER_PASS


def _never(session_id: str) -> bool:
    return False


async def prune_older(
    store: Store,
    before_ts: float,
    *,
    keep: Callable[[str], bool] = _never,
    release: Callable[[list[str]], None] | None = None,
    dry_run: bool = False,
    limit: int | None = None,
    chunk: int = CHUNK,
    on_chunk: Callable[[list[tuple[float, str]]], None] | None = None,
) -> int:
    """Delete (or with `dry_run`, only list) the sessions last updated before `before_ts`
    with no open turn and not kept, at most `limit`; `on_chunk` hears each chunk's
    (updated_at, session_id) once done. Returns how many."""
    done = 0
    after: tuple[float, str] | None = None
    while limit is None or done < limit:
        want = chunk if limit is None else min(chunk, limit - done)
        page = await store.prunable(before_ts, limit=want, after=after)
        if not page:
            break
        after = page[-1]
        found = [(ts, sid) for ts, sid in page if not keep(sid)]
        try:
            if not dry_run and found:
                gone = set(await store.prune([sid for _, sid in found], before_ts=before_ts))
                found = [(ts, sid) for ts, sid in found if sid in gone]
        finally:
            if release is not None:
                release([sid for _, sid in page])
        done += len(found)
        if on_chunk is not None and found:
            on_chunk(found)
        if len(page) < want:
            break
        await trio.lowlevel.checkpoint()  # between two transactions: others go first
    return done


async def prune_on_schedule(
    store: Store,
    retention_s: float,
    *,
    keep: Callable[[str], bool] = _never,
    release: Callable[[list[str]], None] | None = None,
    interval_s: float = PASS_INTERVAL_S,
    now: Callable[[], float] = time.time,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The daemon's retention: a pass at start, then one every `interval_s` (sooner
    while a pass stops at `MAX_PER_PASS`); `now` is the wall clock sessions are stamped
    with. A pass that fails (the store busy past its timeout, a full disk) is logged and
    the next one tries again."""
    task_status.started()
    while True:
        before = now() - retention_s
        done = 0
        try:
            done = await prune_older(store, before, keep=keep, release=release, limit=MAX_PER_PASS)
        except BridgeError as exc:
            log.error("retention: pruning sessions failed: %s; trying again in %.0f s", exc.message, interval_s)
        except Exception:  # our bug: logged with its traceback, and the daemon serves on
            log.exception("retention: pruning sessions failed; trying again in %.0f s", interval_s)
        if done:
            log.info("retention: pruned %d sessions not updated for %g days", done, retention_s / 86400)
        await trio.sleep(_CATCH_UP_S if done >= MAX_PER_PASS else interval_s)
