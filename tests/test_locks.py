"""One run per device: flock-based device locks, released even when the holder is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from iobench.errors import SafetyError
from iobench.system.locks import device_lock, lock_dir


def test_a_second_holder_is_refused_at_once_naming_pid_and_disk() -> None:
    with device_lock(["sdb", "sda", "sda"]) as held:
        assert held == ("sda", "sdb")
        with pytest.raises(SafetyError) as refused, device_lock(["sdc", "sdb"]):
            pass
        message = str(refused.value)
        assert message.startswith(f"another iobench run (pid {os.getpid()}, started ")
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
            with pytest.raises(SafetyError, match=rf"\(pid {child.pid}, started .*\) is using loop7"):  # noqa: PT012
                with device_lock(["loop7"]):
                    pass
            child.send_signal(signal.SIGKILL)
            assert child.wait(timeout=30) == -signal.SIGKILL
        finally:
            child.kill()
            child.wait()
    with device_lock(["loop7"]) as held:
        assert held == ("loop7",)
