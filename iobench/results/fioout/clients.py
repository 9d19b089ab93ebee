"""fio's client/server output with each host named as the caller knows it, by the port it used.

Through an SSH forward every server is ``127.0.0.1`` to fio's client, which
writes that address into each ``client_stats`` entry's ``hostname``; the local
port (``port``) is what tells the hosts apart. The ``All clients`` entry is a
sum fio makes, stamped with whichever host reported last: it is never data
(:mod:`iobench.results.points` combines hosts as it combines jobs).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from iobench.errors import ResultsError
from iobench.results.fioout import detect
from iobench.results.fioout.frame import to_frame
from iobench.results.fioout.jsonout import ALL_CLIENTS, read_json


def parse_client_output(text: str, ports: Mapping[int, str], *, origin: str = "<text>") -> pd.DataFrame:
    """The tidy frame of the hosts in ``ports``, their ``host`` column their names.

    Parameters
    ----------
    text : str
        What ``fio --client=... --output-format=json+`` wrote (the servers'
        text lines around the JSON are skipped, fio #731/#1931).
    ports : mapping of int to str
        Client port → the host's name; entries of other ports are left out.
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
    obj = detect.find_json(text)
    if obj is None or not isinstance(obj.get("client_stats"), list):
        raise ResultsError(f"{origin}: no fio client/server results (no JSON with client_stats)")
    entries = []
    for entry in obj["client_stats"]:
        if not isinstance(entry, dict) or entry.get("jobname") == ALL_CLIENTS:
            continue
        name = ports.get(entry.get("port"))  # type: ignore[arg-type]
        if name is not None:
            entries.append({**entry, "hostname": name})
    return to_frame(read_json({**obj, "client_stats": entries}), origin)
