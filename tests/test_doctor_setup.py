"""`agent-bridge doctor`'s checks of what the config names on this machine
(bridge/doctor_setup.py) and of where an A2A card is read: each failing with its hint,
then passing once fixed, against a real a2a-sdk agent in its own process."""

from __future__ import annotations

import http.server
import os
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import certifi
import trio

from daemon_support import toml

PEERS = Path(__file__).resolve().parent / "peers"


@asynccontextmanager
async def a2a_agent(env: dict[str, str]) -> AsyncIterator[str]:
    """The a2a-sdk test agent (tests/peers/a2a_agent.py): its base URL."""
    peer = await trio.lowlevel.open_process(
        [sys.executable, str(PEERS / "a2a_agent.py")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    try:
        buf = b""
        while b"\n" not in buf:
            chunk = await peer.stdout.receive_some()  # type: ignore[union-attr]
            assert chunk, "the A2A peer exited"
            buf += chunk
        port = int(buf.split(b"\n")[0].split()[1])
        yield f"http://127.0.0.1:{port}"
    finally:
        peer.terminate()
        await peer.wait()


@contextmanager
def redirecting_to(target: str) -> Iterator[str]:
    """An HTTP server that answers every GET with a 302 to `target`: its base URL."""

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


async def doctor(bridge_exe: list[str], config: Path, env: dict[str, str], state_dir: Path) -> tuple[int, dict[tuple[str, str], list[str]]]:
    """Exit status, and the rows by (NAME, BACK or CHECK): [STATUS, DETAIL]."""
    proc = await trio.run_process(
        [*bridge_exe, "doctor", "--config", str(config), "--state-dir", str(state_dir)],
        capture_stdout=True, capture_stderr=True, check=False, env=env,
    )
    out = proc.stdout.decode()
    rows = {}
    for line in out.splitlines()[1:]:
        parts = re.split(r"\s{2,}", line.strip(), maxsplit=3)
        if len(parts) == 4 and parts[0] not in ("ROUTE", "SETUP"):
            rows[(parts[0], parts[1])] = [parts[2], parts[3]]
    return proc.returncode, rows


async def test_doctor_checks_tokens_tls_sockets_state_and_card_urls_then_passes_once_fixed(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    not_pem = tmp_path / "not-a-ca.pem"
    not_pem.write_text("not a certificate\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    state = tmp_path / "state-dir"
    state.mkdir()
    os.chmod(state, 0o777)
    env = {k: v for k, v in clean_env.items() if k != "AGENT_TOKEN"}
    with trio.fail_after(90):
        async with a2a_agent(clean_env) as agent:
            with redirecting_to(f"{agent}/.well-known/agent-card.json") as elsewhere:

                def config(*, fixed: bool) -> Path:
                    back = {"kind": "a2a", "url": agent, "connect_timeout_s": 5}
                    routes = {
                        "tokened": {"back": {**back, "token_env": "AGENT_TOKEN", "ca_file": str(certifi.where() if fixed else not_pem)}},
                        "filed": {"back": {**back, "token_file": str(tmp_path / ("token" if fixed else "missing-token"))}},
                        "wrong-path": {"back": {**back, "url": agent if fixed else f"{agent}/nowhere"}},
                        "redirected": {"back": {**back, "url": agent if fixed else elsewhere}},
                    }
                    socket_path = tmp_path / ("run" if fixed else "a-file") / "acp.sock"
                    path = tmp_path / f"doctor-{fixed}.toml"
                    path.write_text(toml({"routes": routes, "daemon": {"acp_socket": str(socket_path)}}))
                    return path

                code, rows = await doctor(bridge_exe, config(fixed=False), env, state)
                assert code == 1, rows
                failed = {key: detail for key, (status, detail) in rows.items() if status == "FAILED"}
                token = failed[("routes.tokened.back", "token_env")]
                assert "$AGENT_TOKEN is not set" in token and "hint: export AGENT_TOKEN=" in token, token
                ca = failed[("routes.tokened.back", "ca_file")]
                assert "is not a PEM bundle" in ca and "hint: " in ca, ca
                filed = failed[("routes.filed.back", "token_file")]
                assert "cannot read" in filed and "does not exist" in filed, filed
                socket_dir = failed[("daemon", "acp_socket")]
                assert f"{a_file} is not a directory" in socket_dir, socket_dir
                state_row = failed[("store", "state_dir")]
                assert "writable by other users (mode 0777)" in state_row and f"hint: chmod 700 {state}" in state_row, state_row
                # A card is found at the configured URL or not at all: a 404 is not
                # answered from elsewhere, and a redirect to another card is not ok.
                wrong = failed[("wrong-path", "a2a")]
                assert "/nowhere/.well-known/agent-card.json: it answered 404 Not Found" in wrong and "card_url" in wrong, wrong
                redirected = failed[("redirected", "a2a")]
                assert f"redirected to {agent}/.well-known/agent-card.json" in redirected, redirected

                (tmp_path / "token").write_text("s3cret\n")
                os.chmod(state, 0o700)
                code, rows = await doctor(bridge_exe, config(fixed=True), {**env, "AGENT_TOKEN": "s3cret"}, state)
                assert code == 0, rows
                assert all(status == "ok" for status, _ in rows.values()), rows
                assert {("routes.tokened.back", "token_env"), ("routes.tokened.back", "ca_file"), ("routes.filed.back", "token_file")} <= set(rows)
                assert "CA certificates loaded" in rows[("routes.tokened.back", "ca_file")][1]
                assert "s3cret" not in str(rows)  # a token's check never shows it
