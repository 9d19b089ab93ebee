"""The lab: iobench's NUMA, SMT, device-settings and safety sweeps on a real 2-socket SMT machine.

The machine is a QEMU guest (``machine.py``): 2 sockets × 2 cores × 2 threads,
two NUMA nodes at distance 21, an NVMe controller behind a PCIe expander bridge
on each node and a third on the root bus with no node. Its root filesystem is
this machine's ``/`` over virtio-9p (read-only, with a tmpfs overlay), so the
guest runs this checkout and its venv unchanged. ``guest.py`` runs the sweeps
inside; ``checks.py`` reads what came back. ``python -m lab`` does all three.

Under emulation the performance numbers mean nothing; placement, topology,
sysfs settings and safety behave as on hardware.
"""
