"""One run per device: flock-based device locks, released even when the holder is SIGKILLed.

Locks live only in a state folder no other user can change, and a lock file is never
written through a link another user (or an earlier mistake) left in its place.
"""

from __future__ import annotations

import os
import pwd
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from otheruser import OTHER, as_other, others_state_home

from iobench.errors import SafetyError
from iobench.system.locks import LockWait, device_lock, lock_dir

ME = pwd.getpwuid(os.getuid()).pw_name


def test_a_second_holder_is_refused_at_once_naming_pid_and_disk() -> None:
    with device_lock(["sdb", "sda", "sda"]) as held:
        assert held == ("sda", "sdb")
        with pytest.raises(SafetyError) as refused, device_lock(["sdc", "sdb"]):
            pass
        message = str(refused.value)
        assert message.startswith(f"another iobench run (pid {os.getpid()}, user {ME}, started ")
        assert message.endswith(") is using sdb; wait for it or stop it")
        # sdc was taken before sdb failed; it must have been let go again.
        with device_lock(["sdc"]):
            pass
    with device_lock(["sda", "sdb"]):
        pass


def test_lock_files_say_who_holds_them_and_stay_behind() -> None:
    with device_lock(["nvme0n1"]):
        pid, started = (lock_dir() / "nvme0n1.lock").read_text().split()
        assert int(pid) == os.getpid() and started[:2] == "20"
    assert (lock_dir() / "nvme0n1.lock").exists()


def test_odd_disk_names_are_refused() -> None:
    with pytest.raises(SafetyError, match="not a device name"), device_lock(["../x"]):
        pass


HOLDER = """
import time
from iobench.system.locks import device_lock
with device_lock(["loop7"]):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_a_sigkilled_holder_leaves_the_device_free() -> None:
    code = textwrap.dedent(HOLDER)
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == "locked\n"
            with pytest.raises(
                SafetyError, match=rf"\(pid {child.pid}, user {ME}, started .*\) is using loop7"
            ):  # noqa: PT012
                with device_lock(["loop7"]):
                    pass
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=30) == -signal.SIGKILL
        finally:
            child.kill()
            child.wait()
    with device_lock(["loop7"]) as held:
        assert held == ("loop7",)


# --- a state folder or lock file someone else planted -------------------------------------------


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A root-only file a planted lock would point at."""
    path = tmp_path / "shadow"
    path.write_text("root's data\n")
    path.chmod(0o600)
    return path


@pytest.mark.root
def test_another_users_state_folder_is_refused_naming_it(
    victim: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sudo -E`` keeps a user's XDG_STATE_HOME: a lock link they plant there is never written through."""
    with others_state_home() as home:
        as_other(
            'mkdir -p "$1/iobench/locks" && ln -s "$2" "$1/iobench/locks/sda.lock"', str(home), str(victim)
        )
        monkeypatch.setenv("XDG_STATE_HOME", str(home))
        with pytest.raises(SafetyError) as refused, device_lock(["sda"]):
            pass
        message = str(refused.value)
        assert f"folder {home} belongs to {OTHER} (uid {pwd.getpwnam(OTHER).pw_uid}), mode 0755" in message
        assert "set XDG_STATE_HOME" in message
    assert victim.read_text() == "root's data\n"


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_a_state_folder_others_may_write_is_refused(
    tmp_path: Path, mode: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "state"
    home.mkdir()
    home.chmod(mode)
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    with (
        pytest.raises(SafetyError, match=rf"folder {home} belongs to .*, mode 0{mode:o}"),
        device_lock(["sda"]),
    ):
        pass
    assert not (home / "iobench" / "locks" / "sda.lock").exists()


@pytest.mark.parametrize("plant", ["symlink", "hardlink", "fifo"])
def test_a_lock_file_that_is_not_a_plain_file_of_ours_is_refused(plant: str, victim: Path) -> None:
    """Even in a private folder (left from before): the holder's pid is never written through a link."""
    lock_dir().mkdir(parents=True, exist_ok=True)
    path = lock_dir() / "sda.lock"
    if plant == "symlink":
        path.symlink_to(victim)
    elif plant == "hardlink":
        os.link(victim, path)
    else:
        os.mkfifo(path)
    with pytest.raises(
        SafetyError, match=r"lock file .*sda\.lock (is a symbolic link|is not a file of this user's own)"
    ):
        with device_lock(["sda"]):
            pass
    assert victim.read_text() == "root's data\n"


def test_the_state_folder_is_made_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "fresh"))
    with device_lock(["sda"]):
        pass
    for folder in (tmp_path / "fresh" / "iobench", lock_dir()):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((lock_dir() / "sda.lock").stat().st_mode) == 0o600


@pytest.mark.root
def test_nothing_is_made_inside_another_users_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    with others_state_home() as home:
        monkeypatch.setenv("XDG_STATE_HOME", str(home / "not-yet"))
        with pytest.raises(SafetyError, match=rf"folder {home} belongs to {OTHER}"), device_lock(["sda"]):
            pass
        assert list(home.iterdir()) == []


RELEASER = """
import sys
from iobench.system.locks import device_lock
with device_lock(["loop6"]):
    print("locked", flush=True)
    sys.stdin.readline()
print("released", flush=True)
"""


def test_a_waiting_run_says_whose_run_it_waits_for_and_gets_the_lock_when_it_ends() -> None:
    code = textwrap.dedent(RELEASER)
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdin is not None and child.stdout is not None
            assert child.stdout.readline() == "locked\n"
            told: list[tuple[str, str]] = []

            def waiting(disk: str, holder: str) -> None:
                told.append((disk, holder))
                assert child.stdin is not None
                child.stdin.write("go\n")  # the holder ends its run only once the wait was announced
                child.stdin.flush()

            with device_lock(["loop6"], LockWait(60, waiting)) as held:
                assert held == ("loop6",)
                assert child.stdout.readline() == "released\n"
            assert len(told) == 1
            disk, holder = told[0]
            assert disk == "loop6" and holder.startswith(f"pid {child.pid}, user {ME}, started ")
        finally:
            child.kill()
            child.wait()


def test_a_wait_that_runs_out_is_refused_naming_the_holder_and_the_wait() -> None:
    told: list[str] = []
    with device_lock(["sdd"]):
        with (
            pytest.raises(SafetyError) as refused,
            device_lock(["sdd"], LockWait(0, lambda d, h: told.append(d))),
        ):
            pass
    assert str(refused.value).startswith(f"another iobench run (pid {os.getpid()}, user {ME}, started ")
    assert str(refused.value).endswith(
        "still holds sdd after waiting 0 s; wait longer (--wait SECONDS) or stop it"
    )
    assert told == []
