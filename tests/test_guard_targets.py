"""The write guard judges the object fio will open, however the target is spelled.

Victims are real: a loop device holding ext4 and files with random content,
each checked byte for byte (sha256) after every refusal. Hostile spellings go
through ``iobench run`` (exit 2, the matrix's file:line, the path, why and
what to do; nothing written, no results folder). fio itself is asked which
files the job files open, and that check is shown to stand on its own when
the spelling rules are bypassed.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from loopdev import Loop, LoopFactory, sha256_of

from iobench.errors import SafetyError
from iobench.matrix import model
from iobench.matrix.fiocatalog import fio_catalog
from iobench.matrix.model import parse_matrix
from iobench.planner.plans import plan

pytestmark = pytest.mark.fio

MATRIX = """\
version: 1
name: guard
targets:
  - path: "{path}"
    allow_write: {allow}{size}
fio:
  ioengine: psync
  rw: {rw}
  bs: 4k
  runtime: 1
  time_based: 1
"""


def matrix_text(path: str, *, allow: bool = True, rw: str = "randwrite", size: str | None = "1M") -> str:
    sized = f"\n    size: {size}" if size else ""
    return MATRIX.format(path=path, allow=str(allow).lower(), rw=rw, size=sized)


def iobench(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command line, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "iobench", *args], capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture
def unchanged() -> Iterator[Callable[[str | Path], None]]:
    """Register devices and files whose every byte must be the same at the end of the test."""
    watched: list[tuple[str | Path, str]] = []
    yield lambda path: watched.append((path, sha256_of(path)))
    for path, before in watched:
        assert sha256_of(path) == before, f"{path} changed"


@pytest.fixture
def victim(tmp_path: Path, unchanged: Callable[[str | Path], None]) -> Path:
    """A file iobench did not create, with data that must survive."""
    path = tmp_path / "victim.dat"
    path.write_bytes(os.urandom(1 << 20))
    unchanged(path)
    return path


@pytest.fixture
def mounts() -> Iterator[Callable[[str, Path], None]]:
    """Bind-mount a path over another; unmounted at the end of the test."""
    done: list[Path] = []

    def bind(source: str, target: Path) -> None:
        subprocess.run(["mount", "--bind", source, str(target)], check=True, capture_output=True)
        done.append(target)

    yield bind
    for target in reversed(done):
        subprocess.run(["umount", str(target)], check=False, capture_output=True)


def refused_by_cli(write_matrix: Callable[..., Path], tmp_path: Path, text: str, *extra: str) -> str:
    """``iobench run`` on ``text``: it must exit 2, without a traceback, and write no results."""
    out = tmp_path / "results"
    done = iobench("run", str(write_matrix(text)), "--out", str(out), *extra)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()
    return done.stderr.replace("\n  ", " ")


# --- what fio's parser does to a file name, asked of fio itself ------------------------------


def test_fio_honours_the_escaped_colon_and_cuts_at_comments(tmp_path: Path) -> None:
    catalog = fio_catalog()
    job = (
        "[global]\nioengine=null\n"
        f"[a]\nfilename={tmp_path}/a\\:b\n"
        f"[b]\nfilename={tmp_path}/c;d\n"
        f"[c]\nfilename={tmp_path}/e #f\n"
        f"[d]\nfilename={tmp_path}/g:{tmp_path}/h\n"
    )
    [sections] = catalog.opened_files([job])
    assert [(s.name, s.inherited, s.files) for s in sections] == [
        ("a", 0, [f"{tmp_path}/a:b"]),
        ("b", 0, [f"{tmp_path}/c"]),
        ("c", 0, [f"{tmp_path}/e"]),
        ("d", 0, [f"{tmp_path}/g", f"{tmp_path}/h"]),
    ]


def test_a_target_with_colons_is_written_exactly(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    target = tmp_path / "a:b::c.dat"
    neighbour = tmp_path / "a"
    done = iobench(
        "run", str(write_matrix(matrix_text(str(target), size="1M"))), "--out", str(tmp_path / "r"), "-q"
    )
    assert done.returncode == 0, done.stderr
    assert target.stat().st_size == 1 << 20 and not neighbour.exists()


# --- spellings fio would read differently: refused before anything runs ---------------------

SPELLINGS = {
    "hash": ("{v}#x", "fio ends a value at `;` or `#`"),
    "semicolon": ("{v};x", "fio ends a value at `;` or `#`"),
    "trailing-blank": ("{v} ", "starts or ends with a blank"),
    "leading-blank": (" {v}", "starts or ends with a blank"),
    "dollar-env": ("{d}/$HOME", "fio would expand `\\$`"),
    "dollar-keyword": ("{d}/x$ncpus", "fio would expand `\\$`"),
    "backslash": ("{d}/victim\\\\.dat", "reads a backslash in a file name as an escape"),
    "too-long": ("{d}/" + "x/" * 2100 + "f", "longer than 4095 bytes"),
}


@pytest.mark.parametrize(("spelling", "why"), SPELLINGS.values(), ids=SPELLINGS.keys())
def test_a_file_spelled_for_fio_to_read_otherwise_is_refused(
    spelling: str, why: str, victim: Path, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    path = spelling.format(v=victim, d=tmp_path)
    message = refused_by_cli(write_matrix, tmp_path, matrix_text(path, allow=False))
    assert re.search(r"matrix\.yaml:4:\d+: targets\[0\]\.path: target .* is refused", message), message
    assert re.search(why, message), message
    assert "rename or link it" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["matrix.yaml", "victim.dat"]


@pytest.mark.loopdev
def test_a_device_node_spelled_for_fio_to_read_otherwise_is_refused(
    loops: LoopFactory,
    unchanged: Callable[[str | Path], None],
    write_matrix: Callable[..., Path],
    tmp_path: Path,
) -> None:
    loop = ext4(loops)
    unchanged(loop.path)
    node = tmp_path / "node"
    os.mknod(node, stat.S_IFBLK | 0o600, os.stat(loop.path).st_rdev)
    # The spelling fio reads as `node` names a new file for the guard: refused as a spelling.
    message = refused_by_cli(write_matrix, tmp_path, matrix_text(f"{node}#new.dat", allow=True))
    assert "fio ends a value at `;` or `#`" in message


# --- a block device is one, however it is reached -----------------------------------------


def ext4(loops: LoopFactory) -> Loop:
    loop = loops.attach()
    loops.mkfs_ext4(loop)
    return loop


def _symlink(loop: Loop, tmp_path: Path, bind: Callable[[str, Path], None]) -> str:
    link = tmp_path / "by-id" / "disk"
    link.parent.mkdir()
    link.symlink_to(loop.path)
    return str(link)


def _mknod(loop: Loop, tmp_path: Path, bind: Callable[[str, Path], None]) -> str:
    node = tmp_path / "not-dev" / "node"
    node.parent.mkdir()
    os.mknod(node, stat.S_IFBLK | 0o600, os.stat(loop.path).st_rdev)
    return str(node)


def _proc_root(loop: Loop, tmp_path: Path, bind: Callable[[str, Path], None]) -> str:
    return f"/proc/self/root{loop.path}"


def _dotdot(loop: Loop, tmp_path: Path, bind: Callable[[str, Path], None]) -> str:
    return f"{tmp_path}/../../../../../../../..{loop.path}"


def _symlinked_folder(loop: Loop, tmp_path: Path, bind: Callable[[str, Path], None]) -> str:
    (tmp_path / "devices").symlink_to("/dev")
    return f"{tmp_path}/devices/{loop.name}"


def _bind_mount(loop: Loop, tmp_path: Path, bind: Callable[[str, Path], None]) -> str:
    cover = tmp_path / "plain-file.img"
    cover.write_bytes(b"")
    bind(loop.path, cover)
    return str(cover)


ROUTES = {
    "symlink": _symlink,
    "mknod-outside-dev": _mknod,
    "proc-self-root": _proc_root,
    "dotdot": _dotdot,
    "symlinked-folder": _symlinked_folder,
    "bind-mount": _bind_mount,
}


@pytest.mark.loopdev
@pytest.mark.parametrize("route", ROUTES.values(), ids=ROUTES.keys())
def test_every_route_to_a_device_with_data_is_judged_as_that_device(
    route: Callable[[Loop, Path, Callable[[str, Path], None]], str],
    loops: LoopFactory,
    unchanged: Callable[[str | Path], None],
    mounts: Callable[[str, Path], None],
    write_matrix: Callable[..., Path],
    tmp_path: Path,
) -> None:
    loop = ext4(loops)
    unchanged(loop.path)
    path = route(loop, tmp_path, mounts)
    # With or without the matrix's allow_write: every block check, so the filesystem is found and named.
    for allow in (False, True):
        message = refused_by_cli(write_matrix, tmp_path, matrix_text(path, allow=allow, size=None))
        assert re.search(
            r"matrix\.yaml:4:\d+: target .* holds TYPE=ext4 \(filesystem\) at byte offset 1080", message
        ), message
        assert re.search(r"pass --allow-write \S+ on the command line$", message.strip()), message
    # --allow-write names the device by its number: any other spelling of it counts.
    the_plan = plan(parse_matrix(matrix_text(path, size=None), "m.yaml"), allow_write=(loop.path,))
    assert the_plan.runs and all(r.processes for r in the_plan.runs)


@pytest.mark.loopdev
def test_a_mounted_device_reached_by_a_node_outside_dev_is_refused_even_when_allowed_twice(
    loops: LoopFactory,
    unchanged: Callable[[str | Path], None],
    mounts: Callable[[str, Path], None],
    write_matrix: Callable[..., Path],
    tmp_path: Path,
) -> None:
    loop = ext4(loops)
    loops.mount(loop)
    unchanged(loop.path)
    node = _mknod(loop, tmp_path, mounts)
    message = refused_by_cli(
        write_matrix, tmp_path, matrix_text(node, allow=True, size=None), "--allow-write", node
    )
    assert f"{loop.name} is mounted; iobench never writes to it" in message


@pytest.mark.root
def test_a_missing_device_reached_through_proc_root_is_not_a_file_to_create(
    write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    path = "/proc/self/root/dev/iobench-no-such-device"
    message = refused_by_cli(write_matrix, tmp_path, matrix_text(path, allow=True))
    assert f"target {path} does not exist" in message
    assert not os.path.exists("/dev/iobench-no-such-device")


def test_a_fifo_is_named_for_what_it_is(write_matrix: Callable[..., Path], tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    message = refused_by_cli(write_matrix, tmp_path, matrix_text(str(fifo), allow=True))
    assert f"target {fifo} is neither a regular file nor a block device" in message


# --- fio's own answer stands on its own ----------------------------------------------------


def test_fio_s_answer_refuses_what_the_spelling_rules_missed(
    victim: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(model, "filename_problem", lambda path: None)
    matrix = parse_matrix(matrix_text(f"{victim}#new.dat", allow=False, rw="randread"), "m.yaml")
    with pytest.raises(SafetyError) as caught:
        plan(matrix)
    message = str(caught.value)
    assert "fio would not open the files the write guard judged" in message
    assert re.search(rf"m\.yaml:4:\d+: target {victim}#new.dat \(point 1, job\.fio \[", message), message
    assert f"fio would open '{victim}', not '{victim}#new.dat'" in message


def test_a_target_named_like_a_global_section_opens_only_itself(tmp_path: Path) -> None:
    text = matrix_text(str(tmp_path / "global.dat")).replace(
        "    size: 1M\n",
        f"    size: 1M\n  - path: {tmp_path}/other.dat\n    size: 1M\n    allow_write: true\n",
    )
    the_plan = plan(parse_matrix(text, "m.yaml"))
    jobfile = the_plan.runs[0].processes[0].jobfile
    assert "[target-global.dat]" in jobfile and "\n[global.dat]" not in jobfile


def test_the_answer_is_remembered_for_the_same_job_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import iobench.matrix.fiocatalog as fiocatalog

    matrix = parse_matrix(matrix_text(str(tmp_path / "t.dat")), "m.yaml")
    plan(matrix)
    asked: list[list[str]] = []
    real = fiocatalog.run_process

    def counting(argv: list[str], **kwargs: object) -> object:
        asked.append(list(argv))
        return real(argv, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fiocatalog, "run_process", counting)
    plan(matrix)
    assert not any("--debug=file" in argv for argv in asked)


# --- files: what a read point may do to a file iobench did not create -----------------------


def test_a_read_point_never_extends_a_file_iobench_did_not_create(
    victim: Path, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    text = matrix_text(str(victim), allow=False, rw="read", size=None) + "  size: 4M\n  offset: 512k\n"
    path = write_matrix(text)
    [process] = plan(parse_matrix(path.read_text(), str(path))).runs[0].processes
    assert "--readonly" in process.argv
    done = iobench("run", str(path), "--out", str(tmp_path / "r"))
    # fio reads what there is and stops at the end: the point fails, saying why; the file is as it was.
    assert done.returncode == 1, done.stderr
    assert "failed: fio exited with status 1: fio: refusing extend of file due to read-only" in done.stdout
    assert victim.stat().st_size == 1 << 20


def test_a_read_point_mixing_a_foreign_file_and_a_new_one_is_refused(victim: Path, tmp_path: Path) -> None:
    text = matrix_text(str(victim), allow=False, rw="read", size=None).replace(
        "fio:", f"  - path: {tmp_path}/new.dat\n    size: 1M\nfio:"
    )
    with pytest.raises(SafetyError, match=r"shares a fio process with .*new\.dat.*`launch: per-target`"):
        plan(parse_matrix(text, "m.yaml"))
    assert plan(parse_matrix(text + "launch: per-target\n", "m.yaml")).runs


# --- hints that fit where the target came from ---------------------------------------------


def test_a_command_line_target_is_told_to_pass_allow_write(
    victim: Path, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    base = write_matrix(matrix_text(str(tmp_path / "t.dat"), allow=False, rw="read", size="8M"))
    message = refused_by_cli(write_matrix, tmp_path, base.read_text(), "--target", str(victim))
    assert f"--target: target {victim} is smaller than size 8388608: fio would extend it" in message
    assert f"drop `size:` from the matrix's first target, or pass --allow-write {victim}" in message
    assert "allow_write: true" not in message
    writing = base.read_text().replace("rw: read", "rw: write")
    message = refused_by_cli(write_matrix, tmp_path, writing, "--target", str(victim))
    assert f"pass --allow-write {victim} on the command line if it may be overwritten" in message


def test_a_matrix_s_allow_write_never_lets_an_existing_file_be_overwritten(
    victim: Path, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    message = refused_by_cli(write_matrix, tmp_path, matrix_text(str(victim), allow=True, size=None))
    assert (
        f"target {victim} exists and iobench did not create it; pass --allow-write {victim} on the command "
        "line if it may be overwritten (a matrix's allow_write never suffices)"
    ) in message
