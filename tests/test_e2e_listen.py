"""Where a real `agent-bridge serve` listens: `--listen`, `AGENT_BRIDGE_LISTEN` and
`AGENT_BRIDGE__SERVER__LISTEN` over the file's `[server] listen`, in that order; a busy
port named with the ways to change it; /ws client errors naming their peer."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from trio_websocket import open_websocket_url

from daemon_support import base_config, demo_route, start_daemon, toml

EX_OSERR = 71


@pytest.fixture
def busy() -> Iterator[str]:
    """A 127.0.0.1 port another program listens on, as HOST:PORT."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def _free() -> str:
    """A 127.0.0.1 port nobody listens on now (the OS's choice, released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize(
    ("env_keys", "flag"),
    [
        (("AGENT_BRIDGE__SERVER__LISTEN",), False),  # over the file
        (("AGENT_BRIDGE_LISTEN",), False),  # over the file
        (("AGENT_BRIDGE_LISTEN", "AGENT_BRIDGE__SERVER__LISTEN"), False),  # the first over the second
        (("AGENT_BRIDGE_LISTEN",), True),  # --listen over both
    ],
    ids=["env-override", "listen-env", "listen-env-first", "flag-first"],
)
async def test_serve_listens_where_told(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str], busy: str, env_keys: tuple[str, ...], flag: bool
) -> None:
    # Every weaker source names the busy port: the daemon starts only if the strongest one wins.
    config = base_config(tmp_path, {"demo": demo_route()}, server={"listen": busy})
    want = _free()
    env = {key: busy for key in env_keys}
    if flag:
        args: tuple[str, ...] = ("--listen", want)
    else:
        env[env_keys[0]] = want
        args = ()
    async with start_daemon(bridge_exe, tmp_path, clean_env, config, args=args, extra_env=env) as daemon:
        assert daemon.url == f"http://{want}", daemon.url
        status, _ = await daemon.get("/healthz")
        assert status == 200


async def test_a_busy_port_is_named_with_the_ways_to_change_it(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str], busy: str
) -> None:
    path = tmp_path / "busy.toml"
    path.write_text(toml(base_config(tmp_path, {"demo": demo_route()}, server={"listen": busy})))
    with trio.fail_after(60):
        proc = await trio.run_process(
            [*bridge_exe, "serve", "--config", str(path), "--state-dir", str(tmp_path / "state")],
            capture_stdout=True, capture_stderr=True, check=False, env=clean_env,
        )
    err = proc.stderr.decode()
    assert proc.returncode == EX_OSERR, err
    assert f"cannot start: {busy} is already in use" in err, err
    assert "--listen HOST:PORT" in err and "AGENT_BRIDGE_LISTEN" in err and "[server]" in err, err


async def test_ws_client_errors_name_their_peer(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    config = base_config(tmp_path, {"demo": demo_route()})
    async with start_daemon(bridge_exe, tmp_path, clean_env, config, args=("--listen", "127.0.0.1:0")) as daemon:
        with trio.fail_after(30):
            async with open_websocket_url(daemon.url.replace("http://", "ws://") + "/ws") as ws:
                await ws.send_message("this is not JSON")
                answer = await ws.get_message()  # the protocol's error, sent after the log line
                assert "error" in answer, answer
                peer = ws.local.address, ws.local.port  # type: ignore[attr-defined]
    assert f"chat client error from {peer[0]}:{peer[1]}: " in daemon.log_text(), daemon.log_text()


