"""A target is judged with the folders on its way: no other user may be able to change what it leads to.

Another user who can write a folder on a target's path can put a link
where the guard judged a file, between the guard's look and fio's open. The
folders here are real and the other user is real (``nobody``, through
``runuser``); every refusal comes before anything runs and names the folder
and its owner.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakehosts import LocalHosts
from loopdev import sha256_of

from iobench.errors import SafetyError
from iobench.matrix.model import parse_matrix
from iobench.system.fleet import Fleet, HostSpec, HostsRefused
from iobench.system.safety import check_targets
from iobench.system.ssh import SshTarget
from iobench.system.surroundings import open_folder
from iobench.system.topology import discover_topology, locate_target

pytestmark = pytest.mark.root

MATRIX = """\
version: 1
name: surroundings
targets: [{{path: "{path}", size: 1M}}]
fio: {{ioengine: psync, rw: {rw}, bs: 4k, runtime: 1, time_based: 1}}
"""


@pytest.fixture
def shared() -> Iterator[Path]:
    """A root-owned folder (0755) under ``/tmp`` that ``nobody`` can reach, removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="iobench-shared-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def as_nobody(*argv: str) -> None:
    subprocess.run(["runuser", "-u", "nobody", "--", *argv], check=True, timeout=30)


def guard(
    path: Path | str, *, rw: str = "randwrite", protected: str | None = None, proc: Path | None = None
) -> None:
    """The write guard alone, on a one-target matrix; ``protected`` fakes ``fs.protected_symlinks``."""
    matrix = parse_matrix(MATRIX.format(path=path, rw=rw), "m.yaml")
    location = locate_target(str(path), discover_topology("/"))
    if protected is not None and proc is not None:
        (proc / "sys" / "fs").mkdir(parents=True, exist_ok=True)
        (proc / "sys" / "fs" / "protected_symlinks").write_text(protected + "\n")
    kwargs = {"proc": proc} if proc is not None else {}
    check_targets(matrix.targets, {str(path): location}, writes=rw != "read", **kwargs)


def test_a_new_file_in_a_folder_every_user_may_write_is_refused_naming_it(shared: Path) -> None:
    open_dir = shared / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(SafetyError) as caught:
        guard(open_dir / "new.dat")
    message = str(caught.value)
    assert f"directory {open_dir} (owner root, mode 0777) can be written by every user" in message
    assert not (open_dir / "new.dat").exists()
    # Reading is judged the same: a link put there would be read, or laid out.
    with pytest.raises(SafetyError, match="can be written by every user"):
        guard(open_dir / "new.dat", rw="read")


def test_a_folder_another_user_owns_is_refused_naming_the_owner(shared: Path) -> None:
    theirs = shared / "theirs"
    theirs.mkdir()
    nobody = pwd.getpwnam("nobody")
    os.chown(theirs, nobody.pw_uid, nobody.pw_gid)
    with pytest.raises(SafetyError, match=rf"directory {theirs} belongs to nobody \(mode 0755\)"):
        guard(theirs / "new.dat")


def test_a_folder_its_group_may_write_is_refused_when_the_group_has_another_user(shared: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    grouped = shared / "grouped"
    grouped.mkdir()
    os.chown(grouped, 0, nobody.pw_gid)  # nobody's own group: nobody is a member
    grouped.chmod(0o775)
    with pytest.raises(SafetyError, match=r"can be written by group \w+ \([^)]*\bnobody\b"):
        guard(grouped / "new.dat")
    os.chown(grouped, 0, 0)  # root's group: no one else in it here
    guard(grouped / "new.dat")


def test_a_folder_reached_through_a_link_is_judged_where_the_link_leads(shared: Path, tmp_path: Path) -> None:
    open_dir = shared / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    (tmp_path / "looks-private").symlink_to(open_dir)
    with pytest.raises(SafetyError, match=f"directory {open_dir} "):
        guard(tmp_path / "looks-private" / "new.dat")


def test_a_sticky_folder_is_judged_by_whose_name_is_looked_up_and_the_kernel_s_link_rule(
    shared: Path, tmp_path: Path
) -> None:
    sticky = shared / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    proc = tmp_path / "proc"
    # A name not there yet: iobench makes it itself (O_EXCL, O_NOFOLLOW), and then no one else may rename it.
    guard(sticky / "new.dat", protected="0", proc=proc)
    # A name another user put there (a link, say) while the kernel follows their links: refused.
    as_nobody("ln", "-s", "/etc/shadow", str(sticky / "planted.dat"))
    with pytest.raises(SafetyError) as caught:
        guard(sticky / "planted.dat", protected="0", proc=proc)
    assert (
        f"{sticky}/planted.dat belongs to nobody, in sticky directory {sticky} (owner root, mode 1777)"
        in str(caught.value)
    )
    # With fs.protected_symlinks the kernel does not follow it; the sticky folder is then no way in.
    assert open_folder(str(sticky / "planted.dat"), protected_symlinks=True) is None


def test_another_user_s_link_swap_in_an_open_folder_never_reaches_the_victim(
    shared: Path, write_matrix: Callable[..., Path], tmp_path: Path
) -> None:
    """The attack itself: ``nobody`` links the target's name to a root-only file; the run never starts."""
    victim = tmp_path / "root-only.dat"
    victim.write_bytes(os.urandom(1 << 16))
    victim.chmod(0o600)
    before = sha256_of(victim)
    open_dir = shared / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    as_nobody("ln", "-s", str(victim), str(open_dir / "bench.dat"))
    matrix = write_matrix(MATRIX.format(path=open_dir / "bench.dat", rw="randwrite"))
    done = subprocess.run(
        [sys.executable, "-m", "iobench", "run", str(matrix), "--out", str(tmp_path / "r"), "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert f"directory {open_dir} (owner root, mode 0777) can be written by every user" in done.stderr
    assert "Traceback" not in done.stderr
    assert sha256_of(victim) == before
    assert not (tmp_path / "r").exists()


class _HostTarget:
    def __init__(self, path: str) -> None:
        self.path, self.size, self.allow_write, self.home_node = path, 1 << 20, False, None
        self.where, self.from_command_line = "", False


def test_a_host_s_target_in_a_folder_others_may_write_is_refused_there(shared: Path, tmp_path: Path) -> None:
    open_dir = shared / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    private = tmp_path / "private"
    private.mkdir()
    targets = (_HostTarget(str(open_dir / "new.dat")), _HostTarget(str(private / "new.dat")))
    spec = HostSpec(SshTarget("root@h", (), "h"), targets, writes=True)
    with Fleet([spec], fio_version="fio-3.33", connector=LocalHosts(tmp_path)) as fleet:
        with pytest.raises(HostsRefused) as caught:
            fleet.preflight()
    text = str(caught.value)
    assert (
        f"host h (root@h): target {open_dir}/new.dat: directory {open_dir} (owner root, mode 0777) "
        "can be written by every user"
    ) in text
    assert str(private) not in text
