"""The pair matrix: every front × every back row × every kind of tests/matrix/kinds.py.

One daemon for the module (plus what the rows start: a chained agent-bridge, test
peers), one route per back row; each (front, back) pair runs all its kinds in one
client, and the pairs run concurrently (a small limit: 2-core CI). Each test is one
pair: it reports every failing cell of the pair with the expected and the seen value.
The expected `Seen` of a cell is front.carry(back.carry(kind.expect))
(tests/matrix/expect.py); a kind Absent on either side is not run.
"""

from __future__ import annotations

import contextlib
import pprint
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.daemon_support import base_config, start_daemon, toml
from tests.matrix.backs import ROWS, bridge_env, bridge_exe
from tests.matrix.drivers import A2A_JS_CLIENT, DRIVERS, Run
from tests.matrix.expect import diff, expected
from tests.matrix.fronts import FRONTS
from tests.matrix.kinds import KINDS
from tests.npm_support import npm_ci

PAIRS = [(f, b) for f in FRONTS for b in ROWS]
CONCURRENT_PAIRS = 4


async def _run_all(tmp: Path) -> dict[tuple[str, str], Any]:
    results: dict[tuple[str, str], Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        bodies = {row.name: await stack.enter_async_context(row.start(tmp)) for row in ROWS}
        env = bridge_env(tmp)
        config = base_config(tmp, {})
        text = toml({k: v for k, v in config.items() if k != "routes"})
        text += "".join(f'[routes."{name}"]\n{body}\n' for name, body in bodies.items())
        limit = trio.CapacityLimiter(CONCURRENT_PAIRS)
        async with start_daemon(bridge_exe(), tmp, env, text, name="matrix") as d:
            run = Run(daemon=d, config=d.config, tmp=tmp, env=env, exe=bridge_exe())

            async def pair(front: Any, back: Any) -> None:
                kinds = [k for k in KINDS if expected(front, back, k) is not None]
                async with limit:
                    try:
                        with trio.fail_after(240):
                            results[(front.name, back.name)] = await DRIVERS[front.name](run, back.name, kinds)
                    except Exception as exc:  # noqa: BLE001 - the pair's test reports it
                        results[(front.name, back.name)] = f"{type(exc).__name__}: {exc}"

            async with trio.open_nursery() as nursery:
                for front, back in PAIRS:
                    nursery.start_soon(pair, front, back)
            results["log"] = d.log_text()[-4000:]
    return results


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Any]:
    npm_ci(A2A_JS_CLIENT)  # the @a2a-js/sdk column's node client, from its lockfile
    return trio.run(_run_all, tmp_path_factory.mktemp("matrix"))


@pytest.mark.parametrize(("front", "back"), PAIRS, ids=[f"{f.name}-{b.name}" for f, b in PAIRS])
def test_pair(matrix: dict[tuple[str, str], Any], front: Any, back: Any) -> None:
    got = matrix[(front.name, back.name)]
    assert not isinstance(got, str), f"{front.name} × {back.name}: {got}\n{matrix['log']}"
    failures = {}
    for kind in KINDS:
        want = expected(front, back, kind)
        if want is None:
            continue
        seen = got.get(kind.name)
        if not isinstance(seen, type(want)):
            failures[kind.name] = seen
            continue
        if d := diff(kind, want, seen):
            failures[kind.name] = {field: {"expected": e, "seen": s} for field, (e, s) in d.items()}
    assert not failures, f"{front.name} × {back.name}: {len(failures)} failing cells\n{pprint.pformat(failures, width=160)}"
