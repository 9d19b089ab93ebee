"""Every signature libblkid knows refuses a write, made with the real tools on real loop devices.

Each kind is built by the tool that makes it for real (mkfs.*, cryptsetup,
pvcreate, make-bcache, sfdisk, …) on a loop device, then the guard runs on a
writing matrix whose target says ``allow_write: true``: through
:func:`iobench.system.safety.check_targets` for every kind and through ``iobench run``
for some. Each refusal must name the kind and its byte offset, and every byte
of the device must be as it was. A tool that is not installed fails its case
when ``CI=true`` and skips it elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from loopdev import Loop, LoopFactory, sha256_of

from iobench.errors import SafetyError
from iobench.matrix.model import parse_matrix
from iobench.system import safety
from iobench.system.safety import ProbeError, Signature, check_targets, probe_signatures
from iobench.system.topology import discover_topology, locate_target

pytestmark = [pytest.mark.loopdev, pytest.mark.fio]

TOOL_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def need_tool(name: str, package: str) -> str:
    """The path of ``name``; when it is missing the test fails under ``CI=true`` and is skipped elsewhere."""
    found = shutil.which(name, path=TOOL_PATH)
    if found is None:
        message = f"{name} is not installed (apt-get install {package})"
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return found


@dataclass(frozen=True)
class Kind:
    """How to make one kind of signature, and what libblkid calls it and where its magic sits."""

    tool: str
    package: str
    argv: tuple[str, ...]
    key: str
    kind: str
    offset: int
    size_mib: int = 16
    stdin: str = ""


def _sfdisk(label: str, script: str = "") -> Kind:
    offsets = {"dos": 0x1FE, "sun": 0x1FC, "sgi": 0x0}
    return Kind(
        "sfdisk",
        "fdisk",
        ("--quiet", "--no-reread", "--no-tell-kernel", "{dev}"),
        "PTTYPE",
        label,
        offsets[label],
        stdin=f"label: {label}\n{script}",
    )


_LUKS = ("luksFormat", "--batch-mode", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000")
_KEY = ("--key-file", "{key}", "{dev}")

KINDS: dict[str, Kind] = {
    # What the hand-written table knew, except md: mdadm writes a member's superblock only
    # through the kernel's md driver, and the VM these tests were written on has none.
    "ext4": Kind(
        "mkfs.ext4",
        "e2fsprogs",
        ("-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", "{dev}"),
        "TYPE",
        "ext4",
        0x438,
    ),
    "xfs": Kind("mkfs.xfs", "xfsprogs", ("-q", "-f", "{dev}"), "TYPE", "xfs", 0x0, size_mib=300),
    "btrfs": Kind("mkfs.btrfs", "btrfs-progs", ("-q", "-f", "{dev}"), "TYPE", "btrfs", 0x10040, size_mib=128),
    "swap": Kind("mkswap", "util-linux", ("{dev}",), "TYPE", "swap", 0xFF6),
    "vfat-fat16": Kind("mkfs.vfat", "dosfstools", ("{dev}",), "TYPE", "vfat", 0x36),
    "vfat-fat32": Kind("mkfs.fat", "dosfstools", ("-F", "32", "{dev}"), "TYPE", "vfat", 0x52, size_mib=64),
    "exfat": Kind("mkfs.exfat", "exfatprogs", ("{dev}",), "TYPE", "exfat", 0x3),
    "ntfs": Kind("mkfs.ntfs", "ntfs-3g", ("-Q", "-F", "-q", "{dev}"), "TYPE", "ntfs", 0x3),
    "iso9660": Kind(
        "genisoimage", "genisoimage", ("-quiet", "-o", "{dev}", "{src}"), "TYPE", "iso9660", 0x8001
    ),
    "luks1": Kind(
        "cryptsetup", "cryptsetup-bin", (*_LUKS, "--type", "luks1", *_KEY), "TYPE", "crypto_LUKS", 0
    ),
    "luks2": Kind(
        "cryptsetup", "cryptsetup-bin", (*_LUKS, "--type", "luks2", *_KEY), "TYPE", "crypto_LUKS", 0
    ),
    "luks2-second-header": Kind(
        "cryptsetup", "cryptsetup-bin", (*_LUKS, "--type", "luks2", *_KEY), "TYPE", "crypto_LUKS", 0x4000
    ),
    "lvm2-pv": Kind(
        "pvcreate",
        "lvm2",
        # Only this loop device exists for LVM here, and its hint cache is left alone: the host's LVM sees nothing.
        ("--devices", "{dev}", "--config", 'devices {{ hints = "none" }}', "{dev}"),
        "TYPE",
        "LVM2_member",
        0x218,
    ),
    "gpt": Kind("sgdisk", "gdisk", ("-o", "-n", "1:0:0", "{dev}"), "PTTYPE", "gpt", 0x200),
    "gpt-backup-header": Kind(
        "sgdisk", "gdisk", ("-o", "-n", "1:0:0", "{dev}"), "PTTYPE", "gpt", (16 << 20) - 512
    ),
    "gpt-protective-mbr": Kind("sgdisk", "gdisk", ("-o", "-n", "1:0:0", "{dev}"), "PTTYPE", "PMBR", 0x1FE),
    "dos": _sfdisk("dos", ",,L\n"),
    # Beyond them.
    "dos-no-partitions": _sfdisk("dos"),
    "sun": _sfdisk("sun"),
    "sgi": _sfdisk("sgi"),
    "ext4-journal-device": Kind(
        "mke2fs", "e2fsprogs", ("-q", "-F", "-O", "journal_dev", "{dev}"), "TYPE", "jbd", 0x438
    ),
    "f2fs": Kind("mkfs.f2fs", "f2fs-tools", ("-q", "-f", "{dev}"), "TYPE", "f2fs", 0x400, size_mib=64),
    "jfs": Kind("mkfs.jfs", "jfsutils", ("-q", "{dev}"), "TYPE", "jfs", 0x8000),
    "nilfs2": Kind(
        "mkfs.nilfs2", "nilfs-tools", ("-q", "-f", "{dev}"), "TYPE", "nilfs2", 0x406, size_mib=256
    ),
    "reiserfs": Kind(
        "mkfs.reiserfs", "reiserfsprogs", ("-q", "-f", "{dev}"), "TYPE", "reiserfs", 0x10034, size_mib=64
    ),
    "udf": Kind("mkudffs", "udftools", ("{dev}",), "TYPE", "udf", 0x8001),
    "erofs": Kind("mkfs.erofs", "erofs-utils", ("{dev}", "{src}"), "TYPE", "erofs", 0x400),
    "squashfs": Kind(
        "mksquashfs", "squashfs-tools", ("{src}", "{dev}", "-noappend", "-quiet"), "TYPE", "squashfs", 0
    ),
    "cramfs": Kind("mkfs.cramfs", "util-linux", ("{src}", "{dev}"), "TYPE", "cramfs", 0),
    "minix-v1": Kind("mkfs.minix", "util-linux", ("{dev}",), "TYPE", "minix", 0x410),
    "minix-v3": Kind("mkfs.minix", "util-linux", ("-3", "{dev}"), "TYPE", "minix", 0x418),
    "bfs": Kind("mkfs.bfs", "util-linux", ("{dev}",), "TYPE", "bfs", 0),
    "bcache-backing": Kind("make-bcache", "bcache-tools", ("-B", "{dev}"), "TYPE", "bcache", 0x1018),
    "bcache-cache": Kind(
        "make-bcache", "bcache-tools", ("--bucket", "64k", "-C", "{dev}"), "TYPE", "bcache", 0x1018
    ),
    "dm-verity-hash": Kind(
        "veritysetup", "cryptsetup-bin", ("format", "{data}", "{dev}"), "TYPE", "DM_verity_hash", 0
    ),
}

# Enough families to show the command line refuses as the library does.
CLI_KINDS = ["f2fs", "luks2", "lvm2-pv", "bcache-backing", "gpt", "squashfs", "dm-verity-hash"]

MATRIX = """
version: 1
name: guard
targets:
  - path: {path}
    allow_write: true
fio:
  ioengine: psync
  direct: 1
  rw: randwrite
  bs: 4k
  size: 4m
  runtime: 1
  time_based: 1
"""


def make(kind: Kind, loops: LoopFactory, tmp_path: Path) -> Loop:
    """A loop device holding ``kind``, built by its real tool."""
    tool = need_tool(kind.tool, kind.package)
    loop = loops.attach(kind.size_mib)
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "hello.txt").write_text("hello\n")
    key = tmp_path / "key"
    key.write_bytes(b"iobench test key")
    data = tmp_path / "verity-data.img"
    data.write_bytes(b"data\n" * 1000 + bytes(4096 * 8))
    fields = {"dev": loop.path, "src": str(src), "key": str(key), "data": str(data)}
    command = [tool, *(arg.format(**fields) for arg in kind.argv)]
    done = subprocess.run(command, input=kind.stdin, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"{' '.join(command)}: {done.stderr}"
    return loop


def two_superblocks(loops: LoopFactory, tmp_path: Path) -> Loop:
    """A jfs device (superblock at 32 KiB) with mkfs.ext4's superblock copied to 1 KiB: two filesystems at once."""
    loop = make(KINDS["jfs"], loops, tmp_path)
    ext4 = make(KINDS["ext4"], loops, tmp_path)
    with open(ext4.path, "rb") as source, open(loop.path, "r+b") as target:
        source.seek(1024)
        target.seek(1024)
        target.write(source.read(1024))
    return loop


def guard(path: str, allow_write: tuple[str, ...] = ()) -> None:
    """The write guard on a writing matrix whose target says ``allow_write: true``."""
    matrix = parse_matrix(MATRIX.format(path=path), "guard.yaml")
    location = locate_target(path, discover_topology("/"))
    check_targets(matrix.targets, {path: location}, writes=True, allow_write=allow_write)


def iobench(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command line, in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "iobench", *args], capture_output=True, text=True, timeout=300, check=False
    )


def named(kind: Kind) -> list[str]:
    """What a refusal must say about ``kind``."""
    return [f"{kind.key}={kind.kind}", f"{kind.offset} (0x{kind.offset:x})"]


@pytest.fixture
def unchanged() -> Iterator[Callable[[Loop], None]]:
    """Register devices whose every byte must be the same at the end of the test."""
    watched: list[tuple[Loop, str]] = []
    yield lambda loop: watched.append((loop, sha256_of(loop.path)))
    for loop, before in watched:
        assert sha256_of(loop.path) == before, f"{loop.path} changed"


@pytest.mark.parametrize("kind", KINDS.values(), ids=KINDS.keys())
def test_each_kind_is_refused_until_allow_write_names_the_device(
    kind: Kind, loops: LoopFactory, tmp_path: Path, unchanged: Callable[[Loop], None]
) -> None:
    loop = make(kind, loops, tmp_path)
    unchanged(loop)
    found = probe_signatures(loop.path)
    assert (kind.key, kind.kind, kind.offset) in {(s.key, s.kind, s.offset) for s in found}
    with pytest.raises(SafetyError) as refused:
        guard(loop.path)
    message = str(refused.value)
    assert f"target {loop.path} holds " in message
    for words in named(kind):
        assert words in message
    assert message.endswith(f"if it may be destroyed, pass --allow-write {loop.path} on the command line")
    guard(loop.path, allow_write=(loop.path,))


@pytest.mark.parametrize("kind", [KINDS[k] for k in CLI_KINDS], ids=CLI_KINDS)
def test_iobench_run_refuses_with_exit_2(
    kind: Kind,
    loops: LoopFactory,
    tmp_path: Path,
    write_matrix: Callable[..., Path],
    unchanged: Callable[[Loop], None],
) -> None:
    loop = make(kind, loops, tmp_path)
    unchanged(loop)
    out = tmp_path / "results"
    done = iobench("run", str(write_matrix(MATRIX.format(path=loop.path))), "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert f"target {loop.path} holds " in done.stderr
    for words in named(kind):
        assert words in done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()


def test_with_allow_write_on_the_command_line_iobench_run_writes(
    loops: LoopFactory, tmp_path: Path, write_matrix: Callable[..., Path]
) -> None:
    loop = make(KINDS["f2fs"], loops, tmp_path)
    before = sha256_of(loop.path)
    matrix = write_matrix(MATRIX.format(path=loop.path))
    done = iobench("run", str(matrix), "--out", str(tmp_path / "results"), "--allow-write", loop.path, "-q")
    assert done.returncode == 0, done.stderr
    assert sha256_of(loop.path) != before


def test_a_blank_device_still_needs_the_command_line(
    loops: LoopFactory, unchanged: Callable[[Loop], None]
) -> None:
    loop = loops.attach()
    unchanged(loop)
    assert probe_signatures(loop.path) == ()
    with pytest.raises(SafetyError) as refused:
        guard(loop.path)
    assert str(refused.value).endswith(
        f"target {loop.path} is a block device and the matrix writes to it; pass --allow-write {loop.path} "
        "on the command line if its data may be destroyed (a matrix's allow_write never suffices)"
    )
    guard(loop.path, allow_write=(loop.path,))


def test_allow_write_naming_another_device_does_not_override(
    loops: LoopFactory, tmp_path: Path, unchanged: Callable[[Loop], None]
) -> None:
    loop, other = make(KINDS["jfs"], loops, tmp_path), loops.attach()
    unchanged(loop)
    with pytest.raises(SafetyError, match=r"holds TYPE=jfs \(filesystem\) at byte offset 32768 \(0x8000\);"):
        guard(loop.path, allow_write=(other.path,))
    alias = tmp_path / "by-id-alias"
    alias.symlink_to(loop.path)
    guard(loop.path, allow_write=(str(alias),))


def test_every_coexisting_superblock_is_named(
    loops: LoopFactory, tmp_path: Path, unchanged: Callable[[Loop], None]
) -> None:
    """blkid -p gives up on two superblocks (exit 8); wipefs lists both with their offsets."""
    loop = two_superblocks(loops, tmp_path)
    unchanged(loop)
    blkid = subprocess.run(
        [need_tool("blkid", "util-linux"), "-p", loop.path], capture_output=True, text=True, check=False
    )
    assert blkid.returncode == 8, blkid
    with pytest.raises(SafetyError) as refused:
        guard(loop.path)
    assert (
        "TYPE=ext4 (filesystem) at byte offset 1080 (0x438) and TYPE=jfs (filesystem) at byte offset 32768"
        in str(refused.value)
    )


def test_several_offsets_of_one_kind_are_listed_together(loops: LoopFactory, tmp_path: Path) -> None:
    loop = make(KINDS["gpt"], loops, tmp_path)
    with pytest.raises(SafetyError) as refused:
        guard(loop.path)
    end = (16 << 20) - 512
    assert (
        f"holds PTTYPE=gpt (partition table) at byte offsets 512 (0x200), {end} (0x{end:x}) "
        "and PTTYPE=PMBR (partition table) at byte offset 510 (0x1fe);"
    ) in str(refused.value)


# --- when libblkid cannot be asked -------------------------------------------------


def _fake_tool(directory: Path, name: str, script: str) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("tool", ["WIPEFS", "BLKID"])
def test_a_missing_tool_refuses_and_says_what_to_install(
    tool: str,
    loops: LoopFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    unchanged: Callable[[Loop], None],
) -> None:
    loop = loops.attach()
    unchanged(loop)
    name = getattr(safety, tool)
    monkeypatch.setattr(safety, tool, str(tmp_path / "not-installed" / name))
    with pytest.raises(SafetyError) as refused:
        guard(loop.path)
    assert str(refused.value).endswith(
        f"target {loop.path}: what it holds is unknown, so it is not written: "
        f"{name} is not installed (apt-get install util-linux); "
        f"pass --allow-write {loop.path} on the command line if whatever it holds may be destroyed"
    )
    # The user's own --allow-write needs no probe.
    guard(loop.path, allow_write=(loop.path,))


FAILURES = {
    "wipefs-fails": (
        "wipefs",
        "echo 'wipefs: error: no medium' >&2; exit 1",
        "wipefs failed on {dev} (exit 1): wipefs: error: no medium",
    ),
    "wipefs-garbage": (
        "wipefs",
        "echo 'offset type'; exit 0",
        "wipefs printed what iobench cannot read for {dev}",
    ),
    "blkid-usage-error": (
        "blkid",
        "echo 'blkid: bad usage' >&2; exit 4",
        "blkid failed on {dev} (exit 4): blkid: bad usage",
    ),
    # Exit 2 is "nothing found" only when blkid says nothing; with a message it could not look.
    "blkid-cannot-open": (
        "blkid",
        "echo 'blkid: error: {dev}: Permission denied' >&2; exit 2",
        "blkid failed on {dev} (exit 2): blkid: error: {dev}: Permission denied",
    ),
    "blkid-killed": ("blkid", "kill -9 $$", "blkid failed on {dev} (exit -9): no message"),
}


@pytest.mark.parametrize(("tool", "script", "why"), FAILURES.values(), ids=FAILURES.keys())
def test_a_failing_tool_on_path_refuses_even_a_blank_device(
    tool: str,
    script: str,
    why: str,
    loops: LoopFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    unchanged: Callable[[Loop], None],
) -> None:
    loop = loops.attach()
    unchanged(loop)
    fake = tmp_path / "bin"
    _fake_tool(fake, tool, script.format(dev=loop.path))
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(SafetyError) as refused:
        guard(loop.path)
    assert f"what it holds is unknown, so it is not written: {why.format(dev=loop.path)}" in str(
        refused.value
    )


def test_a_hanging_tool_is_stopped_and_refuses(
    loops: LoopFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = loops.attach()
    monkeypatch.setattr(safety, "BLKID", str(_fake_tool(tmp_path / "bin", "blkid", "exec sleep 60")))
    monkeypatch.setattr(safety, "PROBE_TIMEOUT_S", 0.5)
    with pytest.raises(
        SafetyError, match=r"unknown, so it is not written: blkid did not finish within 0.5 s;"
    ):
        guard(loop.path)


def test_iobench_run_with_a_failing_tool_exits_2(
    loops: LoopFactory,
    tmp_path: Path,
    write_matrix: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    unchanged: Callable[[Loop], None],
) -> None:
    loop = loops.attach()
    unchanged(loop)
    fake = tmp_path / "bin"
    _fake_tool(fake, "wipefs", "echo 'wipefs: cannot probe' >&2; exit 1")
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "results"
    done = iobench("run", str(write_matrix(MATRIX.format(path=loop.path))), "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert f"wipefs failed on {loop.path} (exit 1): wipefs: cannot probe" in done.stderr
    assert not out.exists()


def test_an_unreadable_device_is_a_probe_error(tmp_path: Path) -> None:
    with pytest.raises(ProbeError, match=r"missing cannot be read: No such file or directory"):
        probe_signatures(str(tmp_path / "missing"))


def test_a_signature_seen_only_by_blkid_is_reported_without_an_offset(
    loops: LoopFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prober that records no magic offset is missing from wipefs's list; blkid -p still names it."""
    loop = make(KINDS["jfs"], loops, tmp_path)
    # The empty list wipefs prints when the only prober that matched set no magic offset.
    _fake_tool(tmp_path / "bin", "wipefs", """echo '{"signatures": []}'""")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert probe_signatures(loop.path) == (Signature(loop.path, "TYPE", "jfs", "filesystem", None),)
    with pytest.raises(SafetyError, match=r"holds TYPE=jfs \(filesystem\) \(seen by blkid -p only"):
        guard(loop.path)


def test_an_ambivalent_blkid_with_nothing_from_wipefs_still_refuses(
    loops: LoopFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = two_superblocks(loops, tmp_path)
    _fake_tool(tmp_path / "bin", "wipefs", """echo '{"signatures": []}'""")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(SafetyError, match=r"holds TYPE=several superblocks \(seen by blkid -p only"):
        guard(loop.path)
