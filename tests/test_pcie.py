"""PCIe placement: the chain of bridges, link speeds and widths, bandwidth, shared root ports, findings.

Fake sysfs trees are laid out as the kernel lays them out; the values of the
``lab_guest`` tree are those a QEMU 7.2 q35 guest (Debian kernel 6.1) showed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sysfs_snapshots import FakeSysfs, SnapshotCache
from typer.testing import CliRunner

from iobench.system.hostfs import SystemRoot
from iobench.system.pcie import (
    Link,
    PciePlacement,
    encoding_efficiency,
    link_bandwidth,
    link_findings,
    parse_link_speed,
    parse_link_width,
    read_placement,
    shared_root_ports,
    sharing_findings,
    sweep_findings,
)
from iobench.system.topology import Topology, discover_topology

LinkSpec = tuple[
    str | None, str | None, str | None, str | None
]  # current speed, max speed, current width, max width


class FakePci:
    """A fake sysfs with PCI functions: ``function(path, link)``, then ``nvme``/``sata`` disks below them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sysfs = FakeSysfs(root)
        self.sysfs.cpu(0, 0, 0, siblings="0")
        self.sysfs.node(0, cpulist="0", distance="10")
        self._controllers = 0

    def function(self, path: str, link: LinkSpec | None = None, pci_class: str = "0x060400") -> str:
        """Add a PCI function at ``devices/<path>`` (``pci0000:00/0000:00:03.0/...``) with its link files."""
        self.sysfs.write(f"devices/{path}/class", f"{pci_class}\n")
        self.sysfs.write(f"devices/{path}/numa_node", "0\n")
        if link is not None:
            names = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width")
            for name, value in zip(names, link, strict=True):
                if value is not None:
                    self.sysfs.write(f"devices/{path}/{name}", f"{value}\n")
        return path

    def nvme(self, function: str, namespaces: int = 1) -> list[str]:
        """NVMe namespaces the new-kernel way: ``<function>/nvme/nvmeN/nvmeNn1``."""
        ctrl = f"nvme{self._controllers}"
        self._controllers += 1
        names = [f"{ctrl}n{ns}" for ns in range(1, namespaces + 1)]
        for name in names:
            self.sysfs.disk(name, parent=f"{function}/nvme/{ctrl}", scheduler="[none] mq-deadline")
        return names

    def sata(self, function: str, name: str, host: int = 0) -> str:
        self.sysfs.disk(name, parent=f"{function}/ata{host + 1}/host{host}/target{host}:0:0/{host}:0:0:0")
        return name


GEN4_X4: LinkSpec = ("16.0 GT/s PCIe", "16.0 GT/s PCIe", "4", "4")
GEN4_X16_PORT_AT_X4: LinkSpec = ("16.0 GT/s PCIe", "16.0 GT/s PCIe", "4", "16")


def _placement(topo: Topology, name: str) -> PciePlacement:
    device = topo.device(name)
    assert device is not None and device.pcie is not None, name
    return device.pcie


def _kinds(findings: Any) -> list[str]:
    return sorted(f.kind for f in findings)


# --- parsing and bandwidth -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "gts"),
    [
        ("2.5 GT/s PCIe", 2.5),
        ("5.0 GT/s PCIe", 5.0),
        ("8 GT/s", 8.0),  # kernels before 5.x
        ("16.0 GT/s PCIe\n", 16.0),
        ("64.0 GT/s PCIe", 64.0),
        ("Unknown", None),
        ("Unknown speed", None),
        ("", None),
        (None, None),
        ("fast", None),
    ],
)
def test_link_speed_text(text: str | None, gts: float | None) -> None:
    assert parse_link_speed(text) == gts


@pytest.mark.parametrize(
    ("text", "width"),
    [
        ("4", 4),
        ("16\n", 16),
        ("1", 1),
        ("32", 32),
        ("0", None),
        ("255", None),
        ("3", None),
        ("x4", None),
        (None, None),
    ],
)
def test_link_width_text(text: str | None, width: int | None) -> None:
    assert parse_link_width(text) == width


@pytest.mark.parametrize(
    ("gts", "bits_per_symbol"),
    [
        (2.5, (8, 10)),
        (5.0, (8, 10)),
        (8.0, (128, 130)),
        (16.0, (128, 130)),
        (32.0, (128, 130)),
        (64.0, (1, 1)),
    ],
)
def test_encoding_per_generation(gts: float, bits_per_symbol: tuple[int, int]) -> None:
    payload, line = bits_per_symbol
    assert encoding_efficiency(gts) == pytest.approx(payload / line)
    # One lane, one direction: transfers per second × payload share / 8 bits.
    assert link_bandwidth(gts, 1) == pytest.approx(gts * 1e9 * payload / line / 8)
    assert link_bandwidth(gts, 16) == pytest.approx(16 * gts * 1e9 * payload / line / 8)


def test_bandwidth_of_well_known_links() -> None:
    assert link_bandwidth(2.5, 1) == pytest.approx(250e6)  # PCIe 1.0 x1: 250 MB/s
    assert link_bandwidth(5.0, 4) == pytest.approx(2e9)  # PCIe 2.0 x4: 2 GB/s
    assert link_bandwidth(8.0, 4) == pytest.approx(3.938e9, rel=1e-3)  # PCIe 3.0 x4
    assert link_bandwidth(16.0, 4) == pytest.approx(7.877e9, rel=1e-3)  # PCIe 4.0 x4
    assert link_bandwidth(32.0, 16) == pytest.approx(63.02e9, rel=1e-3)  # PCIe 5.0 x16
    assert link_bandwidth(64.0, 16) == pytest.approx(128e9)  # PCIe 6.0 x16, flit mode
    assert link_bandwidth(None, 4) is None and link_bandwidth(8.0, None) is None


# --- the chain ------------------------------------------------------------------------


def test_nvme_behind_a_switch(tmp_path: Path) -> None:
    """Root port → switch upstream port → downstream port → NVMe: every hop, root port first."""
    pci = FakePci(tmp_path)
    rp = pci.function("pci0000:00/0000:00:03.0", GEN4_X16_PORT_AT_X4)
    up = pci.function(f"{rp}/0000:01:00.0", ("16.0 GT/s PCIe", "16.0 GT/s PCIe", "4", "8"))
    down = pci.function(f"{up}/0000:02:00.0", ("16.0 GT/s PCIe", "16.0 GT/s PCIe", "4", "4"))
    nvme = pci.function(f"{down}/0000:03:00.0", GEN4_X4, pci_class="0x010802")
    [name] = pci.nvme(nvme)
    placement = _placement(discover_topology(tmp_path), name)
    assert placement.path == ("0000:00:03.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0")
    assert [h.role for h in placement.hops] == ["device", "bridge", "bridge", "root-port"]
    assert placement.function == "0000:03:00.0" and placement.hops[0].pci_class == "0x010802"
    assert (placement.root_port, placement.root_complex) == ("0000:00:03.0", "pci0000:00")
    assert placement.link == Link(16.0, 16.0, 4, 4)
    assert placement.hops[-1].link == Link(16.0, 16.0, 4, 16)
    assert placement.link_bw_bytes == pytest.approx(link_bandwidth(16.0, 4))
    assert placement.max_link_bw_bytes == pytest.approx(link_bandwidth(16.0, 4))


def test_bandwidth_is_the_narrowest_link_on_the_way(tmp_path: Path) -> None:
    """An x4 Gen4 drive behind a switch whose uplink trained at Gen3 x2: the uplink is what it gets."""
    pci = FakePci(tmp_path)
    rp = pci.function("pci0000:00/0000:00:01.0", ("8.0 GT/s PCIe", "16.0 GT/s PCIe", "2", "8"))
    up = pci.function(f"{rp}/0000:01:00.0", ("8.0 GT/s PCIe", "16.0 GT/s PCIe", "2", "8"))
    down = pci.function(f"{up}/0000:02:00.0", GEN4_X4)
    [name] = pci.nvme(pci.function(f"{down}/0000:03:00.0", GEN4_X4, pci_class="0x010802"))
    placement = _placement(discover_topology(tmp_path), name)
    assert placement.link_bw_bytes == pytest.approx(link_bandwidth(8.0, 2))
    assert placement.max_link_bw_bytes == pytest.approx(link_bandwidth(16.0, 4))
    [degraded] = [f for f in link_findings({name: placement}) if f.kind == "link-degraded"]
    assert degraded.where == "0000:01:00.0" and "0000:00:01.0 → 0000:01:00.0" in degraded.message
    assert "8 GT/s x2" in degraded.message and "16 GT/s x8" in degraded.message


def test_sata_disk_behind_an_ahci_controller(tmp_path: Path) -> None:
    pci = FakePci(tmp_path)
    rp = pci.function("pci0000:00/0000:00:1c.0", ("5.0 GT/s PCIe", "5.0 GT/s PCIe", "1", "1"))
    ahci = pci.function(f"{rp}/0000:02:00.0", ("5.0 GT/s PCIe", "5.0 GT/s PCIe", "1", "1"), "0x010601")
    pci.sata(ahci, "sda")
    placement = _placement(discover_topology(tmp_path), "sda")
    assert placement.path == ("0000:00:1c.0", "0000:02:00.0")
    assert placement.link_bw_bytes == pytest.approx(500e6)
    assert link_findings({"sda": placement}) == []


def test_devices_off_pci_have_no_placement(tmp_path: Path) -> None:
    pci = FakePci(tmp_path)
    pci.sysfs.disk("loop0")
    pci.sysfs.disk("dm-0", slaves=("loop0",), dm_name="vg-lv")
    topo = discover_topology(tmp_path)
    assert all(d.pcie is None for d in topo.devices)
    data = topo.to_dict()
    assert [(d["pci_path"], d["root_port"], d["link"], d["pcie"]) for d in data["devices"]] == [
        ([], None, None, None)
    ] * 2
    assert read_placement(SystemRoot(tmp_path), None) is None


def test_root_complex_integrated_endpoint_has_no_root_port(tmp_path: Path) -> None:
    """QEMU's NVMe on the q35 root bus: no bridge above, link files saying Unknown, 0 and 255."""
    pci = FakePci(tmp_path)
    fn = pci.function("pci0000:00/0000:00:06.0", ("Unknown", "Unknown", "0", "255"), "0x010802")
    names = pci.nvme(fn, namespaces=2)
    topo = discover_topology(tmp_path)
    placement = _placement(topo, names[0])
    assert (placement.path, placement.root_port, placement.root_complex) == (
        ("0000:00:06.0",),
        None,
        "pci0000:00",
    )
    assert (
        placement.link == Link() and placement.link_bw_bytes is None and placement.max_link_bw_bytes is None
    )
    assert topo.pcie_findings() == ()
    # Two namespaces of one controller share everything it has.
    assert topo.shared_root_ports() == {"0000:00:06.0": tuple(names)}
    [shared] = sharing_findings(topo.placements(), names)
    assert "one controller (0000:00:06.0)" in shared.message


def test_nvme_multipath_disk_is_placed_through_its_controller(tmp_path: Path) -> None:
    """A multipath head disk lives under virtual/nvme-subsystem; its controllers are linked from there."""
    pci = FakePci(tmp_path)
    rp = pci.function("pci0000:00/0000:00:02.0", GEN4_X4)
    fn = pci.function(f"{rp}/0000:05:00.0", GEN4_X4, "0x010802")
    ctrl = tmp_path / "sys" / "devices" / fn / "nvme" / "nvme0"
    ctrl.mkdir(parents=True)
    pci.sysfs.disk("nvme0n1", parent="virtual/nvme-subsystem/nvme-subsys0")
    subsystem = tmp_path / "sys" / "devices" / "virtual" / "nvme-subsystem" / "nvme-subsys0"
    (subsystem / "nvme0").symlink_to("../../../pci0000:00/0000:00:02.0/0000:05:00.0/nvme/nvme0")
    placement = _placement(discover_topology(tmp_path), "nvme0n1")
    assert placement.path == ("0000:00:02.0", "0000:05:00.0") and placement.controllers == 1
    assert placement.link_bw_bytes == pytest.approx(link_bandwidth(16.0, 4))


# --- missing and odd files --------------------------------------------------------------


def test_missing_link_files_give_none_never_an_error(tmp_path: Path) -> None:
    pci = FakePci(tmp_path)
    rp = pci.function("pci0000:00/0000:00:03.0", None)  # no link files at all
    fn = pci.function(
        f"{rp}/0000:01:00.0", ("8 GT/s", None, "4", None), "0x010802"
    )  # an old kernel: no max_*
    [name] = pci.nvme(fn)
    # A link file that cannot be read (a folder where a file should be) reads as missing.
    (tmp_path / "sys" / "devices" / rp / "max_link_speed").mkdir()
    topo = discover_topology(tmp_path)
    placement = _placement(topo, name)
    assert placement.hops[-1].link == Link()
    assert placement.link == Link(8.0, None, 4, None)
    assert placement.link_bw_bytes == pytest.approx(link_bandwidth(8.0, 4))
    assert placement.max_link_bw_bytes is None
    assert topo.pcie_findings() == ()
    json.dumps(topo.to_dict())


def test_garbage_in_link_files(tmp_path: Path) -> None:
    pci = FakePci(tmp_path)
    rp = pci.function("pci0000:00/0000:00:03.0", ("fast", "\x00", "wide", "-1"))
    [name] = pci.nvme(pci.function(f"{rp}/0000:01:00.0", ("", "", "", ""), "0x010802"))
    placement = _placement(discover_topology(tmp_path), name)
    assert all(hop.link == Link() for hop in placement.hops)
    assert placement.link_bw_bytes is None and link_findings({name: placement}) == []


# --- findings ----------------------------------------------------------------------------------


def test_link_trained_below_both_ends_is_degraded(tmp_path: Path) -> None:
    """The BIOS case: a Gen4 drive in a Gen4 slot, running at Gen3."""
    pci = FakePci(tmp_path)
    rp = pci.function("pci0000:00/0000:00:01.1", ("8.0 GT/s PCIe", "16.0 GT/s PCIe", "4", "4"))
    [name] = pci.nvme(
        pci.function(f"{rp}/0000:41:00.0", ("8.0 GT/s PCIe", "16.0 GT/s PCIe", "4", "4"), "0x010802")
    )
    topo = discover_topology(tmp_path)
    [warning] = topo.pcie_findings()
    assert (warning.kind, warning.severity, warning.devices, warning.where) == (
        "link-degraded",
        "warning",
        (name,),
        "0000:41:00.0",
    )
    assert "runs at 8 GT/s x4, below the 16 GT/s x4 both its ends support" in warning.message
    assert _placement(topo, name).link_bw_bytes == pytest.approx(link_bandwidth(8.0, 4))


def test_link_with_fewer_lanes_than_both_ends_is_degraded(tmp_path: Path) -> None:
    pci = FakePci(tmp_path)
    rp = pci.function("pci0000:00/0000:00:01.1", ("16.0 GT/s PCIe", "16.0 GT/s PCIe", "2", "4"))
    [name] = pci.nvme(
        pci.function(f"{rp}/0000:41:00.0", ("16.0 GT/s PCIe", "16.0 GT/s PCIe", "2", "4"), "0x010802")
    )
    [warning] = discover_topology(tmp_path).pcie_findings()
    assert warning.kind == "link-degraded" and "16 GT/s x2, below the 16 GT/s x4" in warning.message


def test_slot_slower_than_the_drive_limits_it(tmp_path: Path) -> None:
    """A Gen4 drive in a Gen3 slot trains correctly at Gen3: limited, not degraded."""
    pci = FakePci(tmp_path)
    rp = pci.function("pci0000:00/0000:00:1d.0", ("8.0 GT/s PCIe", "8.0 GT/s PCIe", "4", "4"))
    [name] = pci.nvme(
        pci.function(f"{rp}/0000:3d:00.0", ("8.0 GT/s PCIe", "16.0 GT/s PCIe", "4", "4"), "0x010802")
    )
    [warning] = discover_topology(tmp_path).pcie_findings()
    assert (warning.kind, warning.severity, warning.where) == ("link-limited", "warning", "0000:00:1d.0")
    assert "can use 16 GT/s x4 (7.88 GB/s)" in warning.message
    assert "supports at most 8 GT/s x4 (3.94 GB/s)" in warning.message


def test_wide_port_with_a_narrow_device_is_only_a_note(tmp_path: Path) -> None:
    """What a QEMU 7.2 guest shows: root port 16 GT/s x32 (x-speed/x-width), the NVMe 2.5 GT/s x1 at most."""
    pci = FakePci(tmp_path)
    rp = pci.function("pci0000:00/0000:00:03.0", ("2.5 GT/s PCIe", "16.0 GT/s PCIe", "1", "32"))
    [name] = pci.nvme(
        pci.function(f"{rp}/0000:01:00.0", ("2.5 GT/s PCIe", "2.5 GT/s PCIe", "1", "1"), "0x010802")
    )
    topo = discover_topology(tmp_path)
    [note] = topo.pcie_findings()
    assert (note.kind, note.severity, note.where, note.devices) == (
        "port-below-max",
        "note",
        "0000:00:03.0",
        (name,),
    )
    assert "runs at 2.5 GT/s x1 of its 16 GT/s x32" in note.message
    assert sweep_findings(topo.placements(), [name]) == []
    data = topo.to_dict()
    assert data["warnings"] == [] and data["notes"] == [note.to_dict()]


def test_device_below_its_own_maximum_with_nothing_above(tmp_path: Path) -> None:
    pci = FakePci(tmp_path)
    [name] = pci.nvme(
        pci.function("pci0000:00/0000:00:04.0", ("5.0 GT/s PCIe", "8.0 GT/s PCIe", "2", "2"), "0x010802")
    )
    [warning] = discover_topology(tmp_path).pcie_findings()
    assert warning.kind == "link-degraded" and "below its maximum 8 GT/s x2" in warning.message


def test_a_degraded_uplink_is_judged_once_for_every_device_below(tmp_path: Path) -> None:
    pci = FakePci(tmp_path)
    rp = pci.function("pci0000:00/0000:00:01.0", ("16.0 GT/s PCIe", "16.0 GT/s PCIe", "8", "16"))
    up = pci.function(f"{rp}/0000:01:00.0", ("16.0 GT/s PCIe", "16.0 GT/s PCIe", "8", "16"))
    names = []
    for slot in range(3):
        down = pci.function(f"{up}/0000:02:0{slot}.0", GEN4_X4)
        names += pci.nvme(pci.function(f"{down}/0000:0{3 + slot}:00.0", GEN4_X4, "0x010802"))
    topo = discover_topology(tmp_path)
    [degraded] = topo.pcie_findings()
    assert degraded.kind == "link-degraded" and degraded.devices == tuple(names)
    assert degraded.message.startswith("nvme0n1, nvme1n1, nvme2n1: the link 0000:00:01.0 → 0000:01:00.0")


# --- sharing ----------------------------------------------------------------------------------------


@pytest.fixture
def two_ports(tmp_path: Path) -> tuple[Topology, list[str], str]:
    """Two NVMe behind a switch under root port 0000:00:03.0, a third alone under 0000:00:04.0."""
    pci = FakePci(tmp_path)
    rp = pci.function("pci0000:00/0000:00:03.0", ("8.0 GT/s PCIe", "8.0 GT/s PCIe", "8", "8"))
    up = pci.function(f"{rp}/0000:01:00.0", ("8.0 GT/s PCIe", "8.0 GT/s PCIe", "8", "8"))
    names = []
    for slot in range(2):
        down = pci.function(f"{up}/0000:02:0{slot}.0", ("8.0 GT/s PCIe", "8.0 GT/s PCIe", "4", "4"))
        names += pci.nvme(pci.function(f"{down}/0000:0{3 + slot}:00.0", ("8.0 GT/s PCIe",) * 2 + ("4",) * 2))
    alone = pci.function("pci0000:00/0000:00:04.0", ("8.0 GT/s PCIe", "8.0 GT/s PCIe", "4", "4"))
    names += pci.nvme(pci.function(f"{alone}/0000:10:00.0", ("8.0 GT/s PCIe",) * 2 + ("4",) * 2))
    return discover_topology(tmp_path), names, str(tmp_path)


def test_shared_root_port_is_found(two_ports: tuple[Topology, list[str], str]) -> None:
    topo, (a, b, c), _ = two_ports
    assert topo.shared_root_ports() == {"0000:00:03.0": (a, b)}
    assert shared_root_ports(topo.placements(), [a, c]) == {}
    assert topo.pcie_findings() == ()
    [shared] = sweep_findings(topo.placements(), [b, a, c])
    assert (shared.kind, shared.devices, shared.where) == ("shared-root-port", (a, b), "0000:00:03.0")
    assert "root port 0000:00:03.0 (8 GT/s x8, 7.88 GB/s)" in shared.message
    assert sweep_findings(topo.placements(), [a, c]) == []
    assert sweep_findings(topo.placements(), [a]) == []
    data = topo.to_dict()
    assert data["shared_root_ports"] == [{"root_port": "0000:00:03.0", "devices": [a, b]}]
    device = next(d for d in data["devices"] if d["name"] == a)
    assert device["pci_path"] == ["0000:00:03.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"]
    assert device["root_port"] == "0000:00:03.0"
    assert device["link"] == {
        "current_speed": 8.0,
        "max_speed": 8.0,
        "current_width": 4,
        "max_width": 4,
        "bw_bytes": pytest.approx(link_bandwidth(8.0, 4)),
    }
    assert device["pcie"]["link_bw_bytes"] == pytest.approx(link_bandwidth(8.0, 4))
    assert [h["address"] for h in device["pcie"]["hops"]] == device["pci_path"]
    json.dumps(data)


@pytest.mark.fio
def test_plan_warns_when_a_sweep_shares_a_root_port(
    two_ports: tuple[Topology, list[str], str], write_matrix: Callable[..., Path]
) -> None:
    from iobench.matrix.model import load_matrix
    from iobench.planner.plans import plan

    _, (a, b, c), root = two_ports

    def planned(*disks: str) -> Any:
        targets = ", ".join(f"{{path: /dev/{d}}}" for d in disks)
        path = write_matrix(f"version: 1\nname: pcie\ntargets: [{targets}]\nfio: {{rw: randread, bs: 4k}}\n")
        return plan(load_matrix(path), fsroot=root)

    shared = planned(a, b)
    assert [w.kind for w in shared.warnings] == ["shared-root-port"]
    assert shared.warnings[0].devices == (a, b)
    assert shared.runs and all(r.status == "run" for r in shared.runs)  # a warning, not a refusal
    assert planned(a, c).warnings == ()
    assert planned(a).warnings == ()


@pytest.mark.fio
def test_cli_prints_the_pcie_placement_and_warnings(
    two_ports: tuple[Topology, list[str], str], write_matrix: Callable[..., Path]
) -> None:
    from iobench.cli.commands import app

    _, (a, b, _c), root = two_ports
    runner = CliRunner()
    shown = runner.invoke(app, ["topology", "--fsroot", root])
    assert shown.exit_code == 0, shown.output
    assert f"root port 0000:00:03.0 is shared by {a}, {b}" in shown.stdout
    assert f"pcie {a:<10} pci0000:00 > 0000:00:03.0 [8 GT/s x8] > 0000:01:00.0 [8 GT/s x8] >" in shown.stdout
    path = write_matrix(
        f"version: 1\nname: p\ntargets: [{{path: /dev/{a}}}, {{path: /dev/{b}}}]\nfio: {{rw: read}}\n"
    )
    planned = runner.invoke(app, ["plan", str(path), "--fsroot", root, "--json"])
    assert planned.exit_code == 0, planned.output
    assert json.loads(planned.stdout)  # the JSON stays the list of runs
    assert f"warning: {a}, {b} share root port 0000:00:03.0" in planned.stderr


def test_topology_cli_warns_about_a_degraded_link(tmp_path: Path) -> None:
    from iobench.cli.commands import app

    pci = FakePci(tmp_path)
    rp = pci.function("pci0000:00/0000:00:01.1", ("8.0 GT/s PCIe", "16.0 GT/s PCIe", "4", "4"))
    pci.nvme(pci.function(f"{rp}/0000:41:00.0", ("8.0 GT/s PCIe", "16.0 GT/s PCIe", "4", "4"), "0x010802"))
    shown = CliRunner().invoke(app, ["topology", "--fsroot", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert "warning: nvme0n1: the link 0000:00:01.1 → 0000:41:00.0 runs at 8 GT/s x4" in shown.stderr
    assert "0000:00:01.1 [8 GT/s x4 of 16 GT/s x4] > 0000:41:00.0 [8 GT/s x4 of 16 GT/s x4]" in shown.stdout
    data = json.loads(CliRunner().invoke(app, ["topology", "--fsroot", str(tmp_path), "--json"]).stdout)
    assert [w["kind"] for w in data["warnings"]] == ["link-degraded"]


# --- real snapshots ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory: pytest.TempPathFactory) -> SnapshotCache:
    return SnapshotCache(tmp_path_factory)


def test_snapshot_raid_controller_behind_a_root_port(snapshots: SnapshotCache) -> None:
    """Dell PERC H700 (sda) behind root port 00:03.0; the SATA controller of sr0 reports 5 GT/s x2 but no maximum."""
    topo = discover_topology(snapshots.root("40intel64-2g2n4c+pcilocality"))
    sda, sr0 = _placement(topo, "sda"), _placement(topo, "sr0")
    assert (sda.path, sda.root_port, sda.root_complex) == (
        ("0000:00:03.0", "0000:01:00.0"),
        "0000:00:03.0",
        "pci0000:00",
    )
    assert sda.hops[0].pci_class == "0x010400" and sda.link == Link() and sda.link_bw_bytes is None
    assert (sr0.path, sr0.root_port) == (("0000:00:1f.2",), None)
    assert sr0.link == Link(5.0, None, 2, None)
    assert sr0.link_bw_bytes == pytest.approx(1e9)
    assert topo.pcie_findings() == () and topo.shared_root_ports() == {}
    assert all(d.pcie is None for d in topo.devices if d.name.startswith("loop"))


def test_snapshot_32bit_pci_domain(snapshots: SnapshotCache) -> None:
    topo = discover_topology(snapshots.root("2pa-pcidomain32bits"))
    vda = _placement(topo, "vda")
    assert (vda.path, vda.root_complex) == (("10000:00:04.0",), "pci10000:00")


def test_run_progress_prints_the_plan_warnings_first(two_ports: tuple[Topology, list[str], str]) -> None:
    import io
    from types import SimpleNamespace

    from iobench.cli.console import PlainProgress

    topo, (a, b, _c), _ = two_ports
    warnings = tuple(sweep_findings(topo.placements(), [a, b]))
    out = io.StringIO()
    plan = SimpleNamespace(warnings=warnings, matrix=SimpleNamespace(name="shared"))
    PlainProgress(out).started(plan, [], Path("results/x"))  # type: ignore[arg-type]
    first, second = out.getvalue().splitlines()
    assert first == f"warning: {warnings[0].message}" and first.startswith(
        f"warning: {a}, {b} share root port"
    )
    assert second.startswith("iobench: 0 runs of shared")
