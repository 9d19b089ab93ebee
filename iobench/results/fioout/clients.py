"""fio's client/server output with each host named as the caller knows it, by where it connected.

fio writes into each ``client_stats`` entry the ``hostname`` its client was
given and the ``port``. iobench reaches each host's server through a Unix
socket that a point's folder names after the host (``--client=sock:host-a``):
fio reports that name as the ``hostname``. Runs of older iobench versions
reached servers through TCP forwards on ``127.0.0.1``, where the local port
told hosts apart; such a client is known by both, ``(hostname, port)``, as in
``--client=<hostname>,<port>``. The ``All clients`` entry is a
sum fio makes, stamped with whichever host reported last: it is never data
(:mod:`iobench.results.points` combines hosts as it combines jobs).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import pandas as pd

from iobench.errors import ResultsError
from iobench.results.fioout import detect
from iobench.results.fioout.frame import rows_frame
from iobench.results.fioout.jsonout import ALL_CLIENTS, read_json
from iobench.results.fioout.rows import FRAME_COLUMNS, Row, job_rows


def client_key(client: str) -> tuple[str, int | None]:
    """What ``fio --client=`` took, as fio's output names it: ``sock:host-a`` → ``("host-a", None)``.

    ``127.0.0.1,41023`` (a TCP client of an older run) → ``("127.0.0.1", 41023)``.

    Raises
    ------
    ValueError
        When ``client`` is neither ``sock:NAME`` nor ends in ``,<port>``.
    """
    if client.startswith("sock:"):
        return client.removeprefix("sock:"), None
    address, _, port = client.rpartition(",")
    return address, int(port)


def parse_client_output(
    text: str, clients: Mapping[tuple[str, int | None], str], *, origin: str = "<text>"
) -> pd.DataFrame:
    """The tidy frame of the hosts in ``clients``, their ``host`` column their names.

    Parameters
    ----------
    text : str
        What ``fio --client=... --output-format=json+`` wrote (the servers'
        text lines around the JSON are skipped, fio #731/#1931).
    clients : mapping of (str, int or None) to str
        ``(hostname, port)`` as given to ``--client`` → the host's name (see
        :func:`client_key`; port None for a socket: the name alone); entries
        of other clients are left out.
    origin : str
        Name for messages and the ``source`` column.

    Returns
    -------
    pandas.DataFrame
        One row per job × direction of those hosts; empty when none reported.

    Raises
    ------
    ResultsError
        When ``text`` holds no client/server JSON.
    """
    return rows_frame(client_rows(text, clients, origin=origin))


def client_rows(
    text: str, clients: Mapping[tuple[str, int | None], str], *, origin: str = "<text>"
) -> list[Row]:
    """The frame's rows of :func:`parse_client_output` (what a run keeps until it builds its frame).

    Raises
    ------
    ResultsError
        When ``text`` holds no client/server JSON.
    """
    return client_results(text, clients, origin=origin)[0]


Ran = set[tuple[str, str | None]]
"""What one host ran, as fio reports it: each job's section name and its ``filename`` option."""


def client_results(
    text: str, clients: Mapping[tuple[str, int | None], str], *, origin: str = "<text>"
) -> tuple[list[Row], dict[str, Ran]]:
    """:func:`client_rows`, and what each host ran by fio's own account (its ``job options``).

    Raises
    ------
    ResultsError
        When ``text`` holds no client/server JSON.
    """
    obj = detect.find_json(text)
    if obj is None or not isinstance(obj.get("client_stats"), list):
        raise ResultsError(f"{origin}: no fio client/server results (no JSON with client_stats)")
    entries = []
    ran: dict[str, Ran] = {}
    for entry in obj["client_stats"]:
        if not isinstance(entry, dict) or entry.get("jobname") == ALL_CLIENTS:
            continue
        hostname = str(entry.get("hostname"))
        name = clients.get((hostname, None)) or clients.get((hostname, entry.get("port")))
        if name is not None:
            entries.append({**entry, "hostname": name})
            options = entry.get("job options")
            filename = options.get("filename") if isinstance(options, dict) else None
            ran.setdefault(name, set()).add(
                (str(entry.get("jobname")), None if filename is None else str(filename))
            )
    return job_rows(read_json({**obj, "client_stats": entries}), origin), ran


def ran_elsewise(ran: Ran, planned: Ran) -> str | None:
    """What a host ran that was not planned for it, or did not run that was, in words; None when it ran exactly that."""
    if ran == planned:
        return None
    extra, missing = sorted(ran - planned, key=str), sorted(planned - ran, key=str)
    words = []
    if extra:
        words.append("ran " + ", ".join(_job_words(job) for job in extra))
    if missing:
        words.append("did not run " + ", ".join(_job_words(job) for job in missing))
    return " and ".join(words)


def _job_words(job: tuple[str, str | None]) -> str:
    section, filename = job
    return f"[{section}]" + ("" if filename is None else f" on {filename}")


_HOST, _JOBNAME = FRAME_COLUMNS.index("host"), FRAME_COLUMNS.index("jobname")


def host_share(rows: list[Row], host: str, sections: Collection[str]) -> list[Row]:
    """The rows of ``host``'s jobs among ``sections`` (the job sections one of its fio processes ran)."""
    return [row for row in rows if row[_HOST] == host and row[_JOBNAME] in sections]
