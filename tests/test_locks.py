"""One run per device: flock-based device locks, released even when the holder is SIGKILLed."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import textwrap

import pytest

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
