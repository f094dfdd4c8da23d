"""PgCluster's tables and statements: each a function of one psycopg connection, run by
`PgStore.call` in a worker thread inside one transaction.

Tables (beside the store's `instances`, one row per running daemon, renewed by
`PgStore.heartbeat`):

- `leases`: which instance runs each session's live side, until when. Time is the
  DATABASE clock (`clock_timestamp()`), never a daemon's: machines' clocks differ.
- `cluster_messages`: the body of a command or reply too large for a NOTIFY payload
  (PostgreSQL NOTIFY, "payload ... must be shorter than 8000 bytes"): the notification
  then carries the row's id and the receiver deletes the row as it reads it.

Commands and replies travel as notifications on the receiving instance's channel
(`channel_of`); stored events notify `EVENTS_CHANNEL` (sent by PgStore in the write's
transaction, so a reader woken by it finds the batch committed).
"""

from __future__ import annotations

import hashlib
import re

import psycopg

from bridge.errors import Overloaded

__all__ = [
    "EVENTS_CHANNEL",
    "INLINE_MAX_BYTES",
    "acquire",
    "channel_of",
    "ensure_schema",
    "poke",
    "release",
    "renew",
    "send",
    "send_many",
    "sweep",
    "take_body",
]

EVENTS_CHANNEL = "bridge_events"
# A payload must be shorter than 8000 bytes (PostgreSQL NOTIFY); leave room for the header.
INLINE_MAX_BYTES = 7900

NOW = "extract(epoch from clock_timestamp())"
# pg_advisory_xact_lock key serialising this DDL between instances starting together
# (concurrent CREATE TABLE IF NOT EXISTS may otherwise fail on the catalog's unique index).
_DDL_LOCK = 0x6272_6964_6765_636C  # "bridgecl"

_DDL = (
    """CREATE TABLE IF NOT EXISTS leases (
        session_id TEXT PRIMARY KEY,
        instance_id TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS leases_by_instance ON leases (instance_id)",
    """CREATE TABLE IF NOT EXISTS cluster_messages (
        id BIGSERIAL PRIMARY KEY,
        created_at DOUBLE PRECISION NOT NULL,
        body BYTEA NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS cluster_messages_by_age ON cluster_messages (created_at)",
)

_ALIVE = f"SELECT 1 FROM instances i WHERE i.instance_id = {{col}} AND i.expires_at > {NOW}"

# One statement: take the lease when it is free, ours, expired or its instance is gone;
# else the current holder. The second SELECT reads the statement's snapshot (before the
# INSERT), so it sees the holder the INSERT's WHERE refused.
_ACQUIRE = f"""
WITH taken AS (
    INSERT INTO leases AS l (session_id, instance_id, expires_at)
    VALUES (%(sid)s, %(me)s, {NOW} + %(ttl)s)
    ON CONFLICT (session_id) DO UPDATE
        SET instance_id = excluded.instance_id, expires_at = excluded.expires_at
        WHERE l.instance_id = excluded.instance_id OR l.expires_at <= {NOW}
            OR NOT EXISTS ({_ALIVE.format(col="l.instance_id")})
    RETURNING instance_id
)
SELECT instance_id FROM taken
UNION ALL
SELECT instance_id FROM leases WHERE session_id = %(sid)s AND NOT EXISTS (SELECT 1 FROM taken)
"""

_NOTIFY_INLINE = f"SELECT pg_notify(%(channel)s, %(payload)s) FROM instances i WHERE i.instance_id = %(to)s AND i.expires_at > {NOW}"
_NOTIFY_ROW = f"""
WITH msg AS (
    INSERT INTO cluster_messages (created_at, body)
    SELECT {NOW}, %(body)s WHERE EXISTS ({_ALIVE.format(col="%(to)s")})
    RETURNING id
)
SELECT pg_notify(%(channel)s, %(payload)s || '@' || id) FROM msg
"""

_SAFE = re.compile(r"[0-9A-Za-z_]{1,40}")


def channel_of(instance_id: str) -> str:
    """The channel an instance LISTENs on for commands and replies (an identifier of at
    most 63 bytes: a long or odd instance id is hashed)."""
    if _SAFE.fullmatch(instance_id):
        return f"bridge_to_{instance_id}"
    return "bridge_to_" + hashlib.sha256(instance_id.encode()).hexdigest()[:40]


def ensure_schema(conn: psycopg.Connection) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
    for statement in _DDL:
        conn.execute(statement)


def acquire(conn: psycopg.Connection, *, sid: str, me: str, ttl: float) -> str | None:
    """None when the lease is now ours, else the instance holding it."""
    for _ in range(3):
        row = conn.execute(_ACQUIRE, {"sid": sid, "me": me, "ttl": ttl}).fetchone()
        if row is None:  # another instance inserted it after this statement's snapshot
            row = conn.execute("SELECT instance_id FROM leases WHERE session_id = %s", (sid,)).fetchone()
        if row is not None:
            return None if row[0] == me else str(row[0])
    raise Overloaded("the session's lease kept changing hands; try again")


def release(conn: psycopg.Connection, *, sid: str, me: str) -> None:
    conn.execute("DELETE FROM leases WHERE session_id = %s AND instance_id = %s", (sid, me))


def renew(conn: psycopg.Connection, *, me: str, sids: list[str], ttl: float) -> set[str]:
    """Push the leases of `sids` still ours `ttl` ahead: those sessions. Only these: a
    lease of ours nobody holds (its release failed, its taker gave up on it) expires."""
    rows = conn.execute(
        f"UPDATE leases SET expires_at = {NOW} + %s WHERE instance_id = %s AND session_id = ANY(%s) RETURNING session_id",
        (ttl, me, sids),
    ).fetchall()
    return {row[0] for row in rows}


def sweep(conn: psycopg.Connection, *, message_max_age_s: float) -> set[str]:
    """Free leases that expired or whose instance is gone, drop message rows nobody read
    in time: the ids of the instances whose row has expired."""
    dead = {row[0] for row in conn.execute(f"SELECT instance_id FROM instances WHERE expires_at <= {NOW}")}
    conn.execute(f"DELETE FROM leases l WHERE l.expires_at <= {NOW} OR NOT EXISTS ({_ALIVE.format(col='l.instance_id')})")
    conn.execute(f"DELETE FROM cluster_messages WHERE created_at < {NOW} - %s", (message_max_age_s,))
    return dead


def send(conn: psycopg.Connection, *, to: str, header: str, body: bytes) -> bool:
    """Notify `to` with `header` then `body`, inline when it fits, else through a
    `cluster_messages` row (`header` then `@id`). False when `to` is not a live instance."""
    channel = channel_of(to)
    text = body.decode()
    if len(header) + len(body) <= INLINE_MAX_BYTES:
        row = conn.execute(_NOTIFY_INLINE, {"channel": channel, "payload": header + text, "to": to}).fetchone()
    else:
        row = conn.execute(_NOTIFY_ROW, {"channel": channel, "payload": header, "body": body, "to": to}).fetchone()
    return row is not None


def send_many(conn: psycopg.Connection, *, notes: list[tuple[str, str, bytes]]) -> list[bool]:
    """`send` each (to, header, body), in one transaction (one commit for a batch)."""
    return [send(conn, to=to, header=header, body=body) for to, header, body in notes]


def take_body(conn: psycopg.Connection, *, message_id: int) -> bytes | None:
    row = conn.execute("DELETE FROM cluster_messages WHERE id = %s RETURNING body", (message_id,)).fetchone()
    return None if row is None else bytes(row[0])


def poke(conn: psycopg.Connection, *, me: str) -> None:
    """Wake our own LISTEN thread (it is stopping)."""
    conn.execute("SELECT pg_notify(%s, 'q')", (channel_of(me),))
