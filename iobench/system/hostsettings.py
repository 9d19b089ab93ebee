"""``iobench system show | tune | reset`` on the hosts of a matrix, each reached as a run reaches it.

The hosts (a matrix's ``hosts:``, all or those named) are opened as a
:class:`~iobench.system.fleet.Fleet`: the same connection code, ssh options and
messages as a run's preflight (a refused login, an untrusted host key and an
unreachable host are each said as such), at most
:data:`~iobench.system.fleet.MAX_PARALLEL` at once. None of the run's own
checks apply (fio, numactl, the targets' guard): only the settings are read or
changed.

- ``show``: one remote command per host, the snapshot
  (:func:`~iobench.system.remote.fetch_snapshot`), read by
  :func:`~iobench.system.stability.show` like any snapshot.
- ``tune``: the settings are read from a snapshot, the files written through a
  :class:`~iobench.system.remote.RemoteRoot`, each host's values journaled here
  under the host (:attr:`~iobench.system.fleet.Host.journal_record`), so that
  ``system reset`` and ``iobench restore`` reach it.
- ``reset``: only the hosts with a pending journal here are reached.

A host that fails is an outcome with its problem, the others are still done.
Every remote command runs to its end before the fleet closes its connections:
nothing is left running on a host.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from iobench.errors import IobenchError
from iobench.system.fleet import Connector, Fleet, Host, HostSpec, host_problem, ssh_connector
from iobench.system.remote import RemoteRoot, Snapshot
from iobench.system.stability import SettingState, reset, settings_to_tune, show, tune
from iobench.system.tuning import pending_system_journal

__all__ = ["HostOutcome", "NoSuchHost", "reset_hosts", "select_hosts", "show_hosts", "tune_hosts"]


@dataclass(frozen=True)
class HostOutcome:
    """What ``iobench system`` did on one host.

    Attributes
    ----------
    name : str
        The host's configured name, else its hostname (when it was reached), else its destination.
    destination : str
        Its SSH destination.
    who : str
        How messages name it: ``host a (root@storage-a)``.
    chosen_by : str
        What ``--host`` takes to name it (:func:`select_hosts`): its ``name:``, else its destination.
    states : tuple of SettingState
        ``show``: its settings.
    done : tuple of str
        ``tune``, ``reset``: one line per file written or journal restored.
    problem : str or None
        Why it failed, naming the host; None when it was done.
    """

    name: str
    destination: str
    who: str
    chosen_by: str
    states: tuple[SettingState, ...] = ()
    done: tuple[str, ...] = ()
    problem: str | None = None


class NoSuchHost(IobenchError):
    """A host asked for is not in the matrix; nothing was done. ``name``, ``known``: the facts."""

    def __init__(self, name: str, known: Sequence[str]) -> None:
        self.name = name
        self.known = list(known)
        super().__init__(f"no host named {name!r} in the matrix; its hosts: {', '.join(self.known)}")


def select_hosts(specs: Sequence[HostSpec], names: Sequence[str]) -> list[HostSpec]:
    """The hosts named (by their ``name:``, or their ``ssh:`` destination), in matrix order; all when none is.

    Raises
    ------
    NoSuchHost
        For the first name that is neither, with the names the matrix has.
    """
    if not names:
        return list(specs)
    known = {spec.target.label or spec.target.destination for spec in specs}
    for name in names:
        if not any(name in (spec.target.label, spec.target.destination) for spec in specs):
            raise NoSuchHost(name, sorted(known))
    return [spec for spec in specs if {spec.target.label, spec.target.destination} & set(names)]


Work = Callable[[Fleet, Host], tuple[tuple[SettingState, ...], tuple[str, ...]]]


def _on_hosts(specs: Sequence[HostSpec], work: Work, connector: Connector | None) -> list[HostOutcome]:
    """``work`` on every host at once (bounded); each host's outcome, in order."""
    outcomes: dict[int, HostOutcome] = {}
    # Only a run's preflight compares fio versions; these commands run no fio.
    with Fleet(specs, fio_version="", connector=connector or ssh_connector) as fleet:

        def one(host: Host) -> None:
            target = host.spec.target
            try:
                states, done = work(fleet, host)
            except IobenchError as exc:
                problem = host_problem(host.describe(), str(exc))
                outcome = HostOutcome(
                    host.name, target.destination, host.describe(), target.name, problem=problem
                )
            else:
                outcome = HostOutcome(
                    host.name, target.destination, host.describe(), target.name, states, done
                )
            outcomes[id(host)] = outcome

        fleet.each(one)
        return [outcomes[id(host)] for host in fleet.hosts]


def _reach(fleet: Fleet, host: Host) -> Snapshot:
    """Connect to the host and copy its sysfs and procfs here; its hostname names it from now on."""
    fleet.connect(host)
    snapshot = fleet.snapshot(host)
    host.hostname = snapshot.text("proc/sys/kernel/hostname")
    return snapshot


def show_hosts(
    specs: Sequence[HostSpec], disks: Sequence[str] = (), *, connector: Connector | None = None
) -> list[HostOutcome]:
    """``iobench system show`` of each host, from one snapshot each.

    Parameters
    ----------
    specs
        The hosts (:func:`~iobench.planner.plans.host_specs` of a matrix, maybe :func:`select_hosts`).
    disks
        Whole disks whose write cache and polling to show, on every host; empty: each host's every disk.
    connector
        Makes each host's connection (default OpenSSH; tests pass fakes).

    Returns
    -------
    list of HostOutcome
        In the order of ``specs``; a host that could not be reached has its ``problem``.
    """

    def work(fleet: Fleet, host: Host) -> tuple[tuple[SettingState, ...], tuple[str, ...]]:
        return tuple(show(_reach(fleet, host).system, disks)), ()

    return _on_hosts(specs, work, connector)


def tune_hosts(
    specs: Sequence[HostSpec], names: Sequence[str] = (), *, connector: Connector | None = None
) -> list[HostOutcome]:
    """``iobench system tune`` on each host, each file's value journaled here under the host first.

    Parameters
    ----------
    specs
        The hosts.
    names
        The settings to tune; empty: every tunable setting with a warning on that host.
    connector
        Makes each host's connection (default OpenSSH).

    Returns
    -------
    list of HostOutcome
        In the order of ``specs``: the files written on each, or why nothing was
        (a file it cannot write, an unreachable host: that host is left as it was).

    Raises
    ------
    UnchangeableSetting
        Before any host is reached, when a name is unknown or cannot be set at runtime.
    """
    settings_to_tune(names)

    def work(fleet: Fleet, host: Host) -> tuple[tuple[SettingState, ...], tuple[str, ...]]:
        snapshot = _reach(fleet, host)
        live = RemoteRoot(host, snapshot=snapshot.root)
        return (), tuple(tune(names, system=live, host=host.journal_record, seen=snapshot.system))

    return _on_hosts(specs, work, connector)


def reset_hosts(specs: Sequence[HostSpec], *, connector: Connector | None = None) -> list[HostOutcome]:
    """``iobench system reset`` on each host whose settings ``tune`` journaled here.

    A host without a pending journal is not reached (its outcome is done, with nothing done).

    Returns
    -------
    list of HostOutcome
        In the order of ``specs``; a host whose values could not all be written
        back keeps its journal (``problem`` says so).
    """

    def work(fleet: Fleet, host: Host) -> tuple[tuple[SettingState, ...], tuple[str, ...]]:
        if pending_system_journal(host.journal_record) is None:
            return (), ()
        fleet.connect(host)
        return (), tuple(reset(system=RemoteRoot(host), host=host.journal_record))

    return _on_hosts(specs, work, connector)
