"""The files an ACP route serves its agent (bridge/backs/acp/local.py): nothing blocks for ever.

Issue 13, finding 7: `fs/read_text_file` of a FIFO blocked a worker thread trio cannot
cancel; 45 of them took every default thread (then reloads and DNS look-ups stalled),
and a directory gave -32603 with a traceback. Here the FIFO, directory and device are
refused before any blocking call, each call is bounded by `fs_timeout_s`, and file
threads come from their own small limiter.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import msgspec
import pytest
import trio

from bridge.backs.acp.local import FS_THREADS, LocalFiles, fs_limiter
from bridge.errors import Forbidden, InvalidParams, Overloaded, codes_for

CEILING_S = 20


def raw(**params: object) -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode(params))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("inside")
    os.mkfifo(root / "pipe")
    (root / "zero-link").symlink_to("/dev/zero")
    return root


def default_threads_free() -> bool:
    return trio.to_thread.current_default_thread_limiter().borrowed_tokens == 0


async def test_a_fifo_is_refused_without_waiting_for_a_writer(tree: Path) -> None:
    files = LocalFiles(str(tree), writable=True, max_bytes=1024)
    with trio.fail_after(CEILING_S):
        with pytest.raises(InvalidParams, match="'pipe' is not a regular file") as info:
            await files.read(raw(path="pipe"))
        assert codes_for(info.value).jsonrpc == -32602
        with pytest.raises(InvalidParams, match="not a regular file"):
            await files.write(raw(path="pipe", content="x"))  # no reader: would block or ENXIO
        assert (tree / "pipe").is_fifo()


async def test_a_directory_is_a_clear_invalid_params_not_an_internal_error(tree: Path) -> None:
    files = LocalFiles(str(tree), writable=True, max_bytes=1024)
    with trio.fail_after(CEILING_S):
        with pytest.raises(InvalidParams, match="'sub' is not a regular file"):
            await files.read(raw(path="sub"))
        with pytest.raises(InvalidParams, match="'sub' is not a regular file"):
            await files.write(raw(path="sub", content="x"))
        assert (tree / "sub").is_dir()


async def test_devices_are_refused_directly_or_through_a_link(tree: Path) -> None:
    with trio.fail_after(CEILING_S):
        with pytest.raises(Forbidden):  # the link resolves outside the root
            await LocalFiles(str(tree), writable=False, max_bytes=1024).read(raw(path="zero-link"))
        dev = LocalFiles("/dev", writable=True, max_bytes=1024)
        for name in ("zero", "null"):
            with pytest.raises(InvalidParams, match=f"'{name}' is not a regular file"):
                await dev.read(raw(path=name))
            with pytest.raises(InvalidParams, match="not a regular file"):
                await dev.write(raw(path=name, content="x"))


async def test_fifty_fifo_reads_at_once_leave_every_thread_free(tree: Path) -> None:
    files = LocalFiles(str(tree), writable=False, max_bytes=1024)
    refused: list[BaseException] = []

    async def one() -> None:
        try:
            await files.read(raw(path="pipe"))
        except InvalidParams as exc:
            refused.append(exc)

    with trio.fail_after(CEILING_S):
        async with trio.open_nursery() as nursery:
            for _ in range(50):
                nursery.start_soon(one)
        assert len(refused) == 50
        assert default_threads_free() and fs_limiter().borrowed_tokens == 0
        assert await files.read(raw(path="a.txt")) == {"content": "inside"}


async def test_a_call_that_blocks_is_bounded_and_takes_only_the_file_threads(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that never returns (a stuck mount, here a blocked thread): each call ends at
    fs_timeout_s, and at most FS_THREADS threads are ever held, never trio's defaults."""
    release = threading.Event()

    def stuck(self: LocalFiles, real: str, shown: str) -> str:
        release.wait()
        return "late"

    monkeypatch.setattr(LocalFiles, "_read", stuck)
    files = LocalFiles(str(tree), writable=False, max_bytes=1024, timeout_s=0.2)
    outcomes: list[str] = []

    async def one() -> None:
        try:
            await files.read(raw(path="a.txt"))
            outcomes.append("read")
        except Overloaded as exc:
            outcomes.append(exc.message)

    try:
        with trio.fail_after(CEILING_S):
            async with trio.open_nursery() as nursery:
                for _ in range(3 * FS_THREADS):
                    nursery.start_soon(one)
            assert outcomes == ["reading 'a.txt' did not finish within fs_timeout_s (0.2 s)"] * (3 * FS_THREADS)
            assert fs_limiter().borrowed_tokens == FS_THREADS  # the abandoned threads, no more
            assert default_threads_free()
            assert await trio.to_thread.run_sync(lambda: "the default threads still serve") == "the default threads still serve"
    finally:
        release.set()
    with trio.fail_after(CEILING_S):
        while fs_limiter().borrowed_tokens:  # the abandoned threads end and give their tokens back
            await trio.sleep(0.01)
        monkeypatch.undo()
        assert await files.read(raw(path="a.txt")) == {"content": "inside"}


async def test_regular_files_still_read_and_write(tree: Path) -> None:
    files = LocalFiles(str(tree), writable=True, max_bytes=16)
    with trio.fail_after(CEILING_S):
        await files.write(raw(path="a.txt", content="new"))
        assert await files.read(raw(path="a.txt")) == {"content": "new"}
        await files.write(raw(path="sub/b.txt", content="b"))
        assert (tree / "sub" / "b.txt").read_text() == "b"
        (tree / "big.txt").write_text("x" * 17)
        with pytest.raises(InvalidParams, match="larger than 16 bytes"):
            await files.read(raw(path="big.txt"))
