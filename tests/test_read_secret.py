"""`read_secret` (bridge/config.py): how every token, password and database URL file is
read. A regular file of at most MAX_SECRET_BYTES in UTF-8 yields its stripped content;
anything else yields None (which fails closed), and nothing blocks or reads without bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.config import MAX_SECRET_BYTES, read_secret


def test_a_file_is_read_stripped_and_relative_names_are_in_the_credentials_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("  s3cret\n")
    assert read_secret(None, str(tmp_path / "token")) == "s3cret"
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    assert read_secret(None, "token") == "s3cret"
    monkeypatch.setenv("BRIDGE_TEST_TOKEN", "from-env")
    assert read_secret("BRIDGE_TEST_TOKEN", "token") == "from-env"  # the variable wins
    monkeypatch.setenv("BRIDGE_TEST_TOKEN", "")
    assert read_secret("BRIDGE_TEST_TOKEN", "token") is None  # set empty: none, the file not consulted
    (tmp_path / "blank").write_text(" \n")
    assert read_secret(None, "blank") is None
    (tmp_path / "edge").write_text("x" * MAX_SECRET_BYTES)
    assert read_secret(None, "edge") == "x" * MAX_SECRET_BYTES


def test_what_is_not_a_small_text_file_yields_none(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * (MAX_SECRET_BYTES + 1))
    (tmp_path / "binary").write_bytes(b"\xff\xfe token")
    (tmp_path / "dir").mkdir()
    for name in ("big", "binary", "dir", "missing"):
        assert read_secret(None, str(tmp_path / name)) is None, name
    assert read_secret(None, "/dev/zero") is None  # a device: not read at all
    assert read_secret(None, None) is None


_FIFO_PROBE = """
import json, sys
from bridge.config import read_secret
from bridge.doctor_setup import _token_file
probe = _token_file("routes.r.back", "token_file", sys.argv[1])
print(json.dumps([read_secret(None, sys.argv[1]), probe.ok, probe.detail]))
"""


def test_a_fifo_is_refused_without_blocking_and_doctor_says_why(tmp_path: Path) -> None:
    """Opening a FIFO for reading blocks until a writer comes: in the daemon that would be
    the event loop. In its own interpreter (the timeout only guards the suite)."""
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    out = subprocess.run([sys.executable, "-c", _FIFO_PROBE, str(fifo)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [None, False, f"{fifo} is not a regular file"]


def test_doctor_says_what_the_daemon_would_make_of_a_token_file(tmp_path: Path) -> None:
    from bridge.doctor_setup import _token_file

    (tmp_path / "big").write_bytes(b"x" * (MAX_SECRET_BYTES + 1))
    (tmp_path / "binary").write_bytes(b"\xff\xfe token")
    (tmp_path / "ok").write_text("s3cret\n")
    details = {name: _token_file("r", "token_file", str(tmp_path / name)) for name in ("big", "binary", "ok")}
    assert not details["big"].ok and f"holds {MAX_SECRET_BYTES + 1} bytes" in details["big"].detail
    assert not details["binary"].ok and "is not UTF-8 text" in details["binary"].detail
    assert details["ok"].ok and read_secret(None, str(tmp_path / "ok")) == "s3cret"
