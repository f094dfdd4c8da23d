"""The matrix's back rows that run a test peer with `--matrix` (filled in by the peers' side)."""

from __future__ import annotations

from tests.matrix.rows import BackRow

PEER_ROWS: list[BackRow] = []
