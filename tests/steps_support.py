"""Driving `agent-bridge acp ROUTE` with the scripted official-SDK editor
(tests/peers/acp_driver_steps.py), and reading its report: for the back tests."""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

DRIVER = Path(__file__).resolve().parent / "peers" / "acp_driver_steps.py"

Drive = Callable[..., Awaitable[dict[str, Any]]]


def make_drive(bridge_exe: list[str], state_dir: str, base_env: dict[str, str], tmp_path: Path, route: str) -> Drive:
    """drive(config_toml, steps, *, env=None, **options) -> the editor's report (+ bridge_log, where)."""
    counter = iter(range(1000))

    async def drive(config: str, steps: list[dict[str, Any]], *, env: dict[str, str] | None = None, **options: Any) -> dict[str, Any]:
        n = next(counter)
        cfg = tmp_path / f"bridge-{n}.toml"
        cfg.write_text(config)
        log = tmp_path / f"bridge-{n}.log"
        work = tmp_path / "work"
        work.mkdir(exist_ok=True)
        opts = {"steps": steps, "stderr": str(log), "cwd": str(work), "timeout_s": 60, **options}
        command = [*bridge_exe, "acp", route, "--config", str(cfg), "--state-dir", state_dir, "--log-level", "info"]
        with trio.fail_after(90):
            proc = await trio.run_process(
                [sys.executable, str(DRIVER), json.dumps(opts), *command],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env={**base_env, **(env or {})},
                cwd=str(work),
            )
        bridge_log = log.read_text(errors="replace") if log.exists() else ""
        where = f"\n--- driver stderr:\n{proc.stderr.decode(errors='replace')}\n--- bridge stderr:\n{bridge_log}"
        assert proc.returncode == 0, f"driver exited {proc.returncode}{where}"
        report: dict[str, Any] = json.loads(proc.stdout)
        assert "crash" not in report, f"{report['crash']}{where}"
        assert report["bridge_returncode"] == 0, where
        assert report["sdk_log"] == [], report["sdk_log"]
        report["bridge_log"] = bridge_log
        report["where"] = where
        return report

    return drive


def step(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in report["steps"] if s["name"] == name)


def stop(report: dict[str, Any], name: str) -> str:
    s = step(report, name)
    assert "result" in s, f"{name}: {s.get('error')}{report['where']}"
    return s["result"]["stopReason"]  # type: ignore[no-any-return]


def error(report: dict[str, Any], name: str) -> dict[str, Any]:
    s = step(report, name)
    assert "error" in s, f"{name} should have failed: {s}"
    return s["error"]  # type: ignore[no-any-return]
