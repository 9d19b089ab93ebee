"""``iobench system show --hosts`` over real SSH, on two namespace hosts with their own sshd.

What must show: a section (a JSON object) per host, named by the matrix's
``name:`` or else the host's hostname, with the settings read there (the hosts
share this machine's sysfs, so its values, and their own procfs); a third host
whose key is refused is named with ssh's reason, a refused login, not
"unreachable", while the others are shown, and the exit status is 1; nothing is
left running on any host nor here. Tuning is not tried here: the namespace hosts'
sysfs is this machine's (``test_system_hosts.py`` tunes fake trees).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from netns_hosts import NetnsHost, NetnsHosts

from iobench.system.hostfs import SystemRoot
from iobench.system.ssh import CONTROL_PREFIX
from iobench.system.stability import SETTINGS, show

pytestmark = [pytest.mark.root, pytest.mark.fio]

SETTLE_S = 10.0


def _entry(host: NetnsHost, name: str | None, options: tuple[str, ...], tmp_path: Path) -> str:
    fields = [f"name: {name}"] if name else []
    fields += [f"ssh: {host.ssh}", f"ssh_options: {json.dumps(list(options))}"]
    fields.append(f"targets: [{{path: {tmp_path / (host.name + '.dat')}, size: 8M}}]")
    return "  - {" + ", ".join(fields) + "}"


def matrix(hosts: NetnsHosts, tmp_path: Path) -> Path:
    """Host a named ``left``, host b unnamed, and host a again as ``refused`` with a key it does not accept."""
    stranger = tmp_path / "stranger_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    a, b = hosts["a"], hosts["b"]
    refused = tuple(f"IdentityFile={stranger}" if o.startswith("IdentityFile=") else o for o in a.ssh_options)
    lines = [
        "version: 1",
        "name: system-hosts",
        "fio: {ioengine: null, rw: randread, bs: 4k, runtime: 1, time_based: 1}",
        "hosts:",
        _entry(a, "left", a.ssh_options, tmp_path),
        _entry(b, None, b.ssh_options, tmp_path),
        _entry(a, "refused", refused, tmp_path),
        "matrix:",
        "  iodepth: [1]",
    ]
    path = tmp_path / "hosts.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _control_folders() -> set[Path]:
    return set(Path("/tmp").glob(f"{CONTROL_PREFIX}*"))


def test_system_show_hosts_over_ssh(netns_hosts: object, tmp_path: Path) -> None:
    hosts = netns_hosts(2)  # type: ignore[operator]
    path = matrix(hosts, tmp_path)
    folders = _control_folders()
    argv = [sys.executable, "-m", "iobench", "system", "show", "--hosts", str(path)]
    shown = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=120, check=False)
    assert shown.returncode == 1, shown.stderr
    found = json.loads(shown.stdout)
    assert list(found) == ["left", "b", "refused"]
    here = {s.name: s.to_json() for s in show(SystemRoot())}
    for name in ("left", "b"):
        settings = {s["name"]: s for s in found[name]["settings"]}
        assert list(settings) == [s.name for s in SETTINGS]
        assert settings["thp"] == here["thp"] and settings["c-states"] == here["c-states"]
        # read in the host's own procfs (its pid namespace has no irqbalance, whatever runs here)
        assert settings["irqbalance"]["value"] == "not running"
    problem = found["refused"]["problem"]
    assert "refused the login" in problem and "unreachable" not in problem, problem
    assert "refused the login" in shown.stderr and "1 of 3 hosts failed" in shown.stderr
    text = subprocess.run(
        [*argv, "--host", "left", "--host", "root@b"], capture_output=True, text=True, timeout=120
    )
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("host left (root@a)\n")
    assert "\n\nhost b (root@b)\n" in text.stdout
    assert "transparent huge pages" in text.stdout
    # nothing left running on the hosts (their sshd's sessions end with the connections) nor here
    deadline = time.monotonic() + SETTLE_S
    while any(h.session_pids() for h in hosts) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert {h.name: h.session_pids() for h in hosts} == {"a": [], "b": []}
    assert _control_folders() <= folders
