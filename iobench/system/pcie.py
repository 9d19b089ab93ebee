"""Where a block device sits on PCI Express: the bridges up to its root port and every link's state.

For a block device whose sysfs folder lies below a PCI function (NVMe, a SATA,
SAS or RAID controller, virtio), :func:`read_placement` walks up from that
function to the host bridge (``pci<domain>:<bus>``, the root complex as sysfs
shows it) and reads, for the function and each bridge on the way, the link
attributes the kernel exports: ``current_link_speed``, ``max_link_speed``,
``current_link_width`` and ``max_link_width``. A file that is missing (old
kernels have no ``max_*``), says ``Unknown`` or holds a width that is no PCIe
width gives ``None`` for that value, never an error.

:func:`link_findings` judges one device's path, :func:`sharing_findings` the
devices of one sweep; the criteria are in ``docs/pcie.md``. Everything is read
through :class:`iobench.system.hostfs.SystemRoot`, so it works on a snapshot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from iobench.system.hostfs import SystemRoot

__all__ = [
    "Link",
    "PciHop",
    "PcieFinding",
    "PciePlacement",
    "format_bandwidth",
    "format_link",
    "link_bandwidth",
    "link_findings",
    "parse_link_speed",
    "parse_link_width",
    "read_placement",
    "shared_root_ports",
    "sharing_findings",
    "sweep_findings",
]

_FUNCTION = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_HOST_BRIDGE = re.compile(r"pci[0-9a-f]{4,8}:[0-9a-f]{2}")
_SPEED = re.compile(r"(\d+(?:\.\d+)?)\s*GT/s")
_CONTROLLER = re.compile(r"nvme\d+")
# Widths a PCIe link can train to; 0 (link down) and 255 (a root-complex
# integrated endpoint under QEMU) say nothing.
_WIDTHS = frozenset({1, 2, 4, 8, 12, 16, 32})
_N = TypeVar("_N", int, float)


def parse_link_speed(text: str | None) -> float | None:
    """GT/s from a ``*_link_speed`` attribute.

    Parameters
    ----------
    text : str or None
        ``"8.0 GT/s PCIe"`` (Linux 5.x+), ``"8 GT/s"`` (older kernels),
        ``"Unknown"`` or ``"Unknown speed"``.

    Returns
    -------
    float or None
        The transfer rate in GT/s; None when the text names none.
    """
    match = _SPEED.match(text.strip()) if text else None
    if match is None:
        return None
    speed = float(match.group(1))
    return speed if speed > 0 else None


def parse_link_width(text: str | None) -> int | None:
    """Lanes from a ``*_link_width`` attribute; None for 0, 255 or anything that is no PCIe width."""
    try:
        width = int(text.strip()) if text else None
    except ValueError:
        return None
    return width if width in _WIDTHS else None


def encoding_efficiency(gts: float) -> float:
    """Payload bits per transferred bit of the line code a PCIe generation uses at ``gts``.

    8b/10b up to 5 GT/s (PCIe 1 and 2), 128b/130b from 8 to 32 GT/s (PCIe 3
    to 5), and 1 for the 1b/1b FLIT mode of 64 GT/s (PCIe 6), whose FEC and
    CRC cost is left out like the other generations' packet overhead.
    """
    if gts <= 5.0:
        return 8 / 10
    if gts < 64.0:
        return 128 / 130
    return 1.0


def link_bandwidth(gts: float | None, width: int | None) -> float | None:
    """Bytes per second one direction of a link carries after line coding.

    Parameters
    ----------
    gts : float or None
        Transfer rate per lane, GT/s.
    width : int or None
        Lanes.

    Returns
    -------
    float or None
        ``gts × 1e9 × width × encoding / 8``; None when either is unknown.
        Packet (TLP/DLLP) overhead is not subtracted: real payload tops out
        some 10–15 % lower.

    Examples
    --------
    >>> round(link_bandwidth(8.0, 4) / 1e9, 3)  # PCIe 3.0 x4
    3.938
    """
    if gts is None or width is None:
        return None
    return gts * 1e9 * width * encoding_efficiency(gts) / 8


def format_speed(gts: float | None) -> str:
    """``"2.5 GT/s"``, ``"16 GT/s"`` or ``"?"``."""
    return "?" if gts is None else f"{gts:g} GT/s"


def format_link(gts: float | None, width: int | None) -> str:
    """``"8 GT/s x4"``, with ``?`` for what is unknown."""
    return f"{format_speed(gts)} x{'?' if width is None else width}"


def format_bandwidth(bytes_per_s: float | None) -> str:
    """``"3.94 GB/s"`` (decimal units, as link rates are quoted) or ``"?"``."""
    if bytes_per_s is None:
        return "?"
    if bytes_per_s >= 1e9:
        return f"{bytes_per_s / 1e9:.3g} GB/s"
    return f"{bytes_per_s / 1e6:.3g} MB/s"


@dataclass(frozen=True)
class Link:
    """A PCI function's view of its link: what it runs at now and the most it supports.

    Attributes
    ----------
    current_gts, max_gts : float or None
        ``current_link_speed`` and ``max_link_speed`` in GT/s.
    current_width, max_width : int or None
        ``current_link_width`` and ``max_link_width`` in lanes.
    """

    current_gts: float | None = None
    max_gts: float | None = None
    current_width: int | None = None
    max_width: int | None = None

    @property
    def bw_bytes(self) -> float | None:
        """Bytes/s per direction at the current speed and width (:func:`link_bandwidth`)."""
        return link_bandwidth(self.current_gts, self.current_width)

    @property
    def max_bw_bytes(self) -> float | None:
        """Bytes/s per direction at the maximum speed and width."""
        return link_bandwidth(self.max_gts, self.max_width)

    @property
    def known(self) -> bool:
        """Whether the current speed and width are both known."""
        return self.current_gts is not None and self.current_width is not None

    @property
    def below_max(self) -> bool:
        """Whether the current speed or width is known to be below its maximum."""
        return _below(self.current_gts, self.max_gts) or _below(self.current_width, self.max_width)

    def to_dict(self) -> dict[str, Any]:
        """``current_speed``/``max_speed`` (GT/s), ``current_width``/``max_width`` (lanes), ``bw_bytes``; null where unknown."""
        return {
            "current_speed": self.current_gts,
            "max_speed": self.max_gts,
            "current_width": self.current_width,
            "max_width": self.max_width,
            "bw_bytes": self.bw_bytes,
        }


def _below(value: float | None, ceiling: float | None) -> bool:
    return value is not None and ceiling is not None and value < ceiling


def _min_known(*values: _N | None) -> _N | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


@dataclass(frozen=True)
class PciHop:
    """One PCI function on the way from a block device up to its root port.

    Attributes
    ----------
    address : str
        ``domain:bus:device.function``, e.g. ``0000:3b:00.0``.
    role : {"device", "bridge", "root-port"}
        The function the block device hangs off, a bridge between (a switch
        port), or the topmost bridge: the root port.
    pci_class : str or None
        The ``class`` attribute, e.g. ``0x010802`` (NVMe), ``0x060400`` (bridge).
    link : Link
        What the function reports about its link.
    """

    address: str
    role: Literal["device", "bridge", "root-port"]
    pci_class: str | None
    link: Link

    def to_dict(self) -> dict[str, Any]:
        """``address``, ``role``, ``class`` and the ``link`` fields."""
        return {
            "address": self.address,
            "role": self.role,
            "class": self.pci_class,
            "link": self.link.to_dict(),
        }


@dataclass(frozen=True)
class PciePlacement:
    """A block device's place on PCI: its function, the bridges above it, and the bandwidth of the way up.

    Attributes
    ----------
    hops : tuple of PciHop
        The device's own function first, then each bridge up to the root port.
    root_port : str or None
        The topmost bridge below the host bridge; None when the device's
        function sits on the root bus itself (a root-complex integrated
        endpoint, or a conventional PCI device).
    root_complex : str or None
        The host bridge folder, ``pci0000:00``; under Intel VMD the nearest one
        (VMD's own domain).
    link_bw_bytes : float or None
        Bytes/s per direction the path carries now: the narrowest current
        link between the device and the root port (speed × width × line
        encoding, :func:`link_bandwidth`). None when no link reports both.
    max_link_bw_bytes : float or None
        Bytes/s per direction the device's own link would carry at its
        maximum speed and width.
    controllers : int
        How many controllers lead to the device (NVMe multipath); the path
        shown is the first one's.
    """

    hops: tuple[PciHop, ...]
    root_port: str | None
    root_complex: str | None
    link_bw_bytes: float | None
    max_link_bw_bytes: float | None
    controllers: int = 1

    @property
    def function(self) -> str:
        """The PCI address of the function the block device hangs off."""
        return self.hops[0].address

    @property
    def link(self) -> Link:
        """The device function's own link."""
        return self.hops[0].link

    @property
    def path(self) -> tuple[str, ...]:
        """PCI addresses from the root port down to the device's function (``lspci -t`` order)."""
        return tuple(hop.address for hop in reversed(self.hops))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: the hops root port first, the root port and complex, both bandwidths."""
        return {
            "function": self.function,
            "root_port": self.root_port,
            "root_complex": self.root_complex,
            "link_bw_bytes": self.link_bw_bytes,
            "max_link_bw_bytes": self.max_link_bw_bytes,
            "controllers": self.controllers,
            "hops": [hop.to_dict() for hop in reversed(self.hops)],
        }


@dataclass(frozen=True)
class PcieFinding:
    """Something about PCIe placement a benchmark should know, as data.

    Attributes
    ----------
    kind : {"link-degraded", "link-limited", "port-below-max", "shared-root-port"}
        See ``docs/pcie.md``.
    severity : {"warning", "note"}
        ``note`` only for ``port-below-max``: a port wider or faster than
        what is below it, which limits nothing.
    devices : tuple of str
        The block devices concerned.
    where : str or None
        The PCI address concerned (the port, or the function whose link it is).
    message : str
        One sentence for people.
    """

    kind: Literal["link-degraded", "link-limited", "port-below-max", "shared-root-port"]
    severity: Literal["warning", "note"]
    devices: tuple[str, ...]
    where: str | None
    message: str

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """``kind``, ``severity``, ``devices``, ``where`` and ``message``."""
        return {
            "kind": self.kind,
            "severity": self.severity,
            "devices": list(self.devices),
            "where": self.where,
            "message": self.message,
        }


# --- reading -----------------------------------------------------------------


def read_placement(system: SystemRoot, block_dir: Path | None) -> PciePlacement | None:
    """Find a block device's PCI function and read the links up to its root port.

    Parameters
    ----------
    system : SystemRoot
        The machine or snapshot.
    block_dir : Path or None
        The device's sysfs folder, symlinks resolved (``SystemRoot.block_dir``).

    Returns
    -------
    PciePlacement or None
        None for a device with no PCI function above it (loop, dm, md, brd,
        virtual devices) or when ``block_dir`` is None.
    """
    if block_dir is None:
        return None
    chains = [_chain(system, block_dir)]
    if not chains[0][0]:
        chains = [_chain(system, c) for c in _controllers(system, block_dir)]
        chains = [c for c in chains if c[0]]
        if not chains:
            return None
    functions, host_bridge = chains[0]
    hops = []
    for index, folder in enumerate(functions):
        pci_class = system.read_text(folder / "class")
        # Every function above another one in sysfs is a bridge; the topmost is the root port.
        top = index == len(functions) - 1
        role: Literal["device", "bridge", "root-port"] = (
            "device" if index == 0 else "root-port" if top else "bridge"
        )
        hops.append(PciHop(folder.name, role, pci_class, _read_link(system, folder)))
    root_port = hops[-1].address if hops[-1].role == "root-port" else None
    return PciePlacement(
        hops=tuple(hops),
        root_port=root_port,
        root_complex=host_bridge,
        link_bw_bytes=_min_known(*(hop.link.bw_bytes for hop in hops)),
        max_link_bw_bytes=hops[0].link.max_bw_bytes,
        controllers=len(chains),
    )


def _chain(system: SystemRoot, start: Path) -> tuple[list[Path], str | None]:
    """PCI function folders above ``start`` (nearest first) up to the nearest host bridge."""
    top = system.realpath("sys/devices")
    functions: list[Path] = []
    current = start
    while current != top and top in current.parents:
        if _HOST_BRIDGE.fullmatch(current.name):
            return functions, current.name
        if _FUNCTION.fullmatch(current.name):
            functions.append(current)
        current = current.parent
    return functions, None


def _controllers(system: SystemRoot, block_dir: Path) -> list[Path]:
    """The controllers behind an NVMe multipath disk (which lives under ``virtual/nvme-subsystem``).

    Newer kernels list the path disks in ``<disk>/multipath/``; every kernel
    links each controller from the subsystem folder that holds the disk.
    """
    paths = [system.realpath(block_dir / "multipath" / n) for n in system.list_dir(block_dir / "multipath")]
    if paths:
        return paths
    subsystem = block_dir.parent.parent if block_dir.parent.name == "block" else block_dir.parent
    return [
        system.realpath(subsystem / name)
        for name in system.list_dir(subsystem)
        if _CONTROLLER.fullmatch(name)
    ]


def _read_link(system: SystemRoot, folder: Path) -> Link:
    return Link(
        current_gts=parse_link_speed(system.read_text(folder / "current_link_speed")),
        max_gts=parse_link_speed(system.read_text(folder / "max_link_speed")),
        current_width=parse_link_width(system.read_text(folder / "current_link_width")),
        max_width=parse_link_width(system.read_text(folder / "max_link_width")),
    )


# --- judging -------------------------------------------------------------------


@dataclass(frozen=True)
class _Span:
    """One physical link: between ``lower`` (a function) and ``upper`` (the port above it)."""

    lower: PciHop
    upper: PciHop

    @property
    def current(self) -> tuple[float | None, int | None]:
        # Both ends report the one link's state; the lower end's is read first, as the kernel's own check does.
        low, up = self.lower.link, self.upper.link
        gts = low.current_gts if low.current_gts is not None else up.current_gts
        width = low.current_width if low.current_width is not None else up.current_width
        return gts, width

    @property
    def capable(self) -> tuple[float | None, int | None]:
        """The most both ends support; one end's maximum when the other's is unknown."""
        low, up = self.lower.link, self.upper.link
        return _min_known(low.max_gts, up.max_gts), _min_known(low.max_width, up.max_width)

    @property
    def name(self) -> str:
        return f"{self.upper.address} → {self.lower.address}"


def _spans(placement: PciePlacement) -> list[_Span]:
    hops = placement.hops
    return [_Span(hops[i], hops[i + 1]) for i in range(len(hops) - 1)]


def _devices(devices: Iterable[str]) -> str:
    return ", ".join(devices)


def link_findings(
    placements: Mapping[str, PciePlacement | None], names: Iterable[str] | None = None
) -> list[PcieFinding]:
    """Judge the links from each device up to its root port.

    Parameters
    ----------
    placements : mapping of str to PciePlacement or None
        Device name → placement (:func:`read_placement`).
    names : iterable of str, optional
        Only these devices (a sweep's disks); default all.

    Returns
    -------
    list of PcieFinding
        ``link-degraded`` (warning) for each link that runs below what both
        of its ends support, or for a device's own link below its maximum
        when nothing above it is known; ``link-limited`` (warning) when a
        port's maximum leaves a device less bandwidth than it can use;
        ``port-below-max`` (note) for a port below its own maximum only
        because the other end of its link supports no more. A link or port
        above several devices is judged once and names them all.
    """
    chosen = [
        (n, p) for n in (placements if names is None else dict.fromkeys(names)) if (p := placements.get(n))
    ]
    spans: dict[tuple[str, str], tuple[_Span, list[str]]] = {}
    ports: dict[str, tuple[PciHop, list[str]]] = {}
    for name, placement in chosen:
        for span in _spans(placement):
            spans.setdefault((span.upper.address, span.lower.address), (span, []))[1].append(name)
        for hop in placement.hops[1:]:
            ports.setdefault(hop.address, (hop, []))[1].append(name)
    findings: list[PcieFinding] = []
    degraded_at: set[str] = set()
    for span, devices in spans.values():
        (gts, width), (cap_gts, cap_width) = span.current, span.capable
        if _below(gts, cap_gts) or _below(width, cap_width):
            degraded_at.update((span.lower.address, span.upper.address))
            findings.append(
                PcieFinding(
                    "link-degraded",
                    "warning",
                    tuple(devices),
                    span.lower.address,
                    f"{_devices(devices)}: the link {span.name} runs at {format_link(gts, width)}, below the "
                    f"{format_link(cap_gts, cap_width)} both its ends support (a firmware/BIOS speed limit, "
                    "a riser or slot with fewer lanes, or signal trouble)",
                )
            )
    for name, placement in chosen:
        own = placement.link
        if len(placement.hops) == 1 and own.below_max:
            findings.append(
                PcieFinding(
                    "link-degraded",
                    "warning",
                    (name,),
                    placement.function,
                    f"{name}: {placement.function} runs its link at "
                    f"{format_link(own.current_gts, own.current_width)}, below its maximum "
                    f"{format_link(own.max_gts, own.max_width)}",
                )
            )
        limited = _limited(name, placement)
        if limited is not None:
            findings.append(limited)
    for hop, devices in ports.values():
        link = hop.link
        if link.below_max and hop.address not in degraded_at:
            findings.append(
                PcieFinding(
                    "port-below-max",
                    "note",
                    tuple(devices),
                    hop.address,
                    f"port {hop.address} (above {_devices(devices)}) runs at "
                    f"{format_link(link.current_gts, link.current_width)} of its "
                    f"{format_link(link.max_gts, link.max_width)}: the other end of its link supports no more, "
                    "so this limits nothing",
                )
            )
    return findings


def _limited(name: str, placement: PciePlacement) -> PcieFinding | None:
    """The link whose ends' maxima leave less than the device's own maximum (the narrowest if several)."""
    wanted = placement.max_link_bw_bytes
    if wanted is None:
        return None
    worst: tuple[float, _Span] | None = None
    for span in _spans(placement):
        capable = link_bandwidth(*span.capable)
        if capable is not None and capable < wanted and (worst is None or capable < worst[0]):
            worst = (capable, span)
    if worst is None:
        return None
    capable, span = worst
    own = placement.link
    return PcieFinding(
        "link-limited",
        "warning",
        (name,),
        span.upper.address,
        f"{name} can use {format_link(own.max_gts, own.max_width)} ({format_bandwidth(wanted)}) but the link "
        f"{span.name} supports at most {format_link(*span.capable)} ({format_bandwidth(capable)})",
    )


def shared_root_ports(
    placements: Mapping[str, PciePlacement | None], names: Iterable[str] | None = None
) -> dict[str, tuple[str, ...]]:
    """Root ports (or, with no root port, PCI functions) with more than one of the devices below them.

    Parameters
    ----------
    placements : mapping of str to PciePlacement or None
        Device name → placement.
    names : iterable of str, optional
        Only these devices (a sweep's disks); default all.

    Returns
    -------
    dict of str to tuple of str
        Root port address → the devices under it, sorted; two namespaces of
        one root-complex integrated controller group under that controller.
    """
    wanted = list(placements) if names is None else list(dict.fromkeys(names))
    groups: dict[str, list[str]] = {}
    for name in wanted:
        placement = placements.get(name)
        if placement is not None:
            groups.setdefault(placement.root_port or placement.function, []).append(name)
    return {port: tuple(sorted(devs)) for port, devs in sorted(groups.items()) if len(devs) > 1}


def sharing_findings(
    placements: Mapping[str, PciePlacement | None], names: Iterable[str]
) -> list[PcieFinding]:
    """``shared-root-port`` warnings for the devices of one sweep.

    Parameters
    ----------
    placements : mapping of str to PciePlacement or None
        Device name → placement (``Topology``'s devices).
    names : iterable of str
        The whole disks the sweep drives.

    Returns
    -------
    list of PcieFinding
        One per root port with two or more of ``names`` below it, naming the
        link they share and its bandwidth when known.
    """
    findings = []
    for port, devices in shared_root_ports(placements, names).items():
        below = [p for d in devices if (p := placements.get(d)) is not None]
        if len({p.function for p in below}) == 1:
            where = f"one controller ({port})"
        else:
            link = next((h.link for h in below[0].hops if h.address == port), Link())
            known = (
                f" ({format_link(link.current_gts, link.current_width)}, {format_bandwidth(link.bw_bytes)})"
            )
            where = f"root port {port}" + (known if link.known else "")
        findings.append(
            PcieFinding(
                "shared-root-port",
                "warning",
                devices,
                port,
                f"{_devices(devices)} share {where}: together they get at most that link's bandwidth",
            )
        )
    return findings


def sweep_findings(placements: Mapping[str, PciePlacement | None], names: Iterable[str]) -> list[PcieFinding]:
    """The warnings a sweep over ``names`` should carry: their degraded or limiting links, shared root ports.

    Parameters
    ----------
    placements : mapping of str to PciePlacement or None
        Device name → placement (``Topology.placements()``).
    names : iterable of str
        The whole disks the sweep drives, in the order of its targets.

    Returns
    -------
    list of PcieFinding
        Only ``severity == "warning"`` findings: :func:`link_findings` of the
        disks, then :func:`sharing_findings`.
    """
    disks = list(dict.fromkeys(names))
    warnings = [f for f in link_findings(placements, disks) if f.severity == "warning"]
    return warnings + sharing_findings(placements, disks)
