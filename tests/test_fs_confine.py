"""Path confinement of the files and terminals the ACP back serves itself.

`confine(root, path)` resolves `..` and symlinks and refuses anything outside the
route's cwd; `LocalFiles` opens the resolved path with O_NOFOLLOW, so a symlink
swapped in after the check is refused too; `LocalTerminals` runs only inside it.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest
import trio

from bridge.backs.acp.local import LocalFiles, LocalTerminals, _Terminal, confine
from bridge.errors import Forbidden, InvalidParams, NotFound


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """root/{a.txt, sub/b.txt, in-link → a.txt, out-link → ../secret.txt, dir-out → ..}
    and, beside root, secret.txt and root-evil/ (a sibling whose name starts like root)."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("a")
    (root / "sub" / "b.txt").write_text("b")
    (tmp_path / "secret.txt").write_text("secret")
    (tmp_path / "root-evil").mkdir()
    (tmp_path / "root-evil" / "x.txt").write_text("x")
    (root / "in-link").symlink_to(root / "a.txt")
    (root / "out-link").symlink_to(tmp_path / "secret.txt")
    (root / "dir-out").symlink_to(tmp_path)
    (root / "rel-out").symlink_to("../secret.txt")
    return root


def raw(**params: object) -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode(params))


@pytest.mark.parametrize(
    "path",
    ["a.txt", "sub/b.txt", "sub/../a.txt", "./sub/./b.txt", "in-link", "new/file.txt", "", "."],
)
def test_inside_is_allowed(tree: Path, path: str) -> None:
    root = os.path.realpath(tree)
    full = os.path.join(root, path) if path else root
    got = confine(root, full)
    assert got == os.path.realpath(full)
    assert got == root or got.startswith(root + os.sep)


def test_relative_paths_are_taken_from_the_root(tree: Path) -> None:
    root = os.path.realpath(tree)
    assert confine(root, "sub/b.txt") == os.path.join(root, "sub", "b.txt")


@pytest.mark.parametrize(
    "path",
    [
        "../secret.txt",  # a `..` escape
        "sub/../../secret.txt",
        "../root-evil/x.txt",  # a sibling that shares the root's name as a prefix
        "out-link",  # a symlink pointing out
        "rel-out",
        "dir-out/secret.txt",  # through a symlinked directory
    ],
)
def test_escapes_are_refused(tree: Path, path: str) -> None:
    root = os.path.realpath(tree)
    with pytest.raises(Forbidden, match="outside the route's working directory"):
        confine(root, os.path.join(root, path))
    with pytest.raises(Forbidden):
        confine(root, path)


def test_symlinked_directory_back_inside_is_allowed(tree: Path) -> None:
    root = os.path.realpath(tree)
    assert confine(root, os.path.join(root, "dir-out", "root", "a.txt")) == os.path.join(root, "a.txt")


@pytest.mark.parametrize("path", ["/etc/passwd", "/", "/tmp", "/proc/self/environ"])
def test_absolute_paths_elsewhere_are_refused(tree: Path, path: str) -> None:
    with pytest.raises(Forbidden):
        confine(os.path.realpath(tree), path)


@pytest.mark.parametrize("path", [None, 3, "a\x00b"])
def test_invalid_paths(tree: Path, path: object) -> None:
    with pytest.raises(InvalidParams):
        confine(os.path.realpath(tree), path)


def test_a_root_given_through_a_symlink_works(tmp_path: Path, tree: Path) -> None:
    link = tmp_path / "root-link"
    link.symlink_to(tree)
    files = LocalFiles(str(link), writable=False, max_bytes=1024)
    assert files.root == os.path.realpath(tree)
    assert confine(files.root, str(link / "a.txt")) == os.path.join(files.root, "a.txt")


# -- LocalFiles ---------------------------------------------------------------------------


async def test_read_and_write_inside(tree: Path) -> None:
    with trio.fail_after(10):
        files = LocalFiles(str(tree), writable=True, max_bytes=1024)
        assert await files.read(raw(path=str(tree / "a.txt"))) == {"content": "a"}
        await files.write(raw(path=str(tree / "new" / "deep" / "c.txt"), content="line1\nline2\nline3\n"))
        assert (tree / "new" / "deep" / "c.txt").read_text() == "line1\nline2\nline3\n"
        got = await files.read(raw(path=str(tree / "new" / "deep" / "c.txt"), line=2, limit=1))
        assert got == {"content": "line2\n"}
        with pytest.raises(NotFound):
            await files.read(raw(path=str(tree / "missing.txt")))


async def test_reads_and_writes_outside_are_refused(tree: Path) -> None:
    with trio.fail_after(10):
        files = LocalFiles(str(tree), writable=True, max_bytes=1024)
        for path in (tree / ".." / "secret.txt", tree / "out-link", Path("/etc/hostname")):
            with pytest.raises(Forbidden):
                await files.read(raw(path=str(path)))
        for path in (tree / ".." / "evil.txt", tree / "out-link", tree / "dir-out" / "evil.txt"):
            with pytest.raises(Forbidden):
                await files.write(raw(path=str(path), content="pwned"))
        assert (tree.parent / "secret.txt").read_text() == "secret"
        assert not (tree.parent / "evil.txt").exists()


async def test_read_only_route_refuses_writes(tree: Path) -> None:
    with trio.fail_after(10):
        files = LocalFiles(str(tree), writable=False, max_bytes=1024)
        with pytest.raises(Forbidden, match="read-only"):
            await files.write(raw(path=str(tree / "a.txt"), content="x"))
        assert (tree / "a.txt").read_text() == "a"


def test_a_symlink_swapped_in_after_the_check_is_not_followed(tree: Path) -> None:
    files = LocalFiles(str(tree), writable=True, max_bytes=1024)
    real = confine(files.root, str(tree / "swap.txt"))  # checked while it did not exist
    os.symlink(tree.parent / "secret.txt", real)  # then replaced by a link out
    with pytest.raises(Forbidden):
        files._read(real, "swap.txt")
    with pytest.raises(Forbidden):
        files._write(real, "swap.txt", "pwned")
    assert (tree.parent / "secret.txt").read_text() == "secret"


async def test_large_files_need_line_and_limit(tree: Path) -> None:
    with trio.fail_after(10):
        (tree / "big.txt").write_text("x" * 5000)
        files = LocalFiles(str(tree), writable=False, max_bytes=1024)
        with pytest.raises(InvalidParams, match="larger than 1024 bytes"):
            await files.read(raw(path=str(tree / "big.txt")))


# -- LocalTerminals -----------------------------------------------------------------------


async def test_terminal_cwd_is_confined(tree: Path) -> None:
    terms = LocalTerminals(str(tree), env={"PATH": os.environ["PATH"]}, limit=4096, max_count=2, grace=1)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            for cwd in (str(tree.parent), str(tree / "dir-out"), "/"):
                with pytest.raises(Forbidden):
                    await terms.call("terminal/create", raw(command="pwd", cwd=cwd), nursery=nursery)
            made = await terms.call("terminal/create", raw(command="pwd", cwd=str(tree / "sub")), nursery=nursery)
            tid = made["terminalId"]
            assert await terms.call("terminal/wait_for_exit", raw(terminalId=tid), nursery=nursery) == {"exitCode": 0, "signal": None}
            out = await terms.call("terminal/output", raw(terminalId=tid), nursery=nursery)
            assert out["output"] == os.path.join(os.path.realpath(tree), "sub") + "\n"
            # A running terminal is killed (its whole group) and its exit reported.
            made = await terms.call("terminal/create", raw(command="sleep", args=["60"]), nursery=nursery)
            with pytest.raises(Forbidden, match="at most 2 terminals"):
                await terms.call("terminal/create", raw(command="true"), nursery=nursery)
            await terms.call("terminal/kill", raw(terminalId=made["terminalId"]), nursery=nursery)
            out = await terms.call("terminal/output", raw(terminalId=made["terminalId"]), nursery=nursery)
            assert out["exitStatus"] == {"exitCode": None, "signal": "SIGTERM"}
            await terms.call("terminal/release", raw(terminalId=made["terminalId"]), nursery=nursery)
            with pytest.raises(NotFound):
                await terms.call("terminal/output", raw(terminalId=made["terminalId"]), nursery=nursery)


def test_terminal_output_is_truncated_from_the_start_at_a_character() -> None:
    term = _Terminal(limit=5)
    term.add(b"abcd")
    assert not term.truncated
    term.add("éfghi".encode())  # 10 bytes: the last 5 start inside "é", which goes whole
    assert term.truncated
    assert term.output.decode("utf-8") == "fghi"
