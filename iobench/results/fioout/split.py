"""Run numbered blocks of work in this process and forked ones, sharing the blocks out as they go.

:func:`~iobench.results.fioout.parse_fio` cuts a long file list into blocks
and hands them out through a pipe holding one token per block: each process
(this one and each forked child) takes the next token when it is free, so a
process that gets less CPU (a busy machine) simply takes fewer blocks. A
child sends back its results, pickled, through its own pipe; the results come
back in block order.

Failures: a block that raises stops the process that ran it; the exception of
the lowest-numbered failing block is raised, as a serial run would raise it
(every block below it was taken before it, and completed). A child that dies
without answering (killed, out of memory) loses nothing: its blocks are run
again here.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
from collections.abc import Callable
from typing import Any, TypeVar

from iobench.errors import ResultsError

T = TypeVar("T")
R = TypeVar("R")

MAX_BLOCKS = 2048
"""Most blocks one run shares out: their tokens (2 bytes each) fit one pipe page, written before any reader."""

_TOKEN = struct.Struct("=H")

Failure = tuple[int, BaseException]


def _take(tokens: int, work: Callable[[int], T]) -> tuple[dict[int, T], Failure | None]:
    """Run blocks until the tokens run out or one raises."""
    results: dict[int, T] = {}
    while True:
        token = os.read(tokens, _TOKEN.size)  # tokens are read whole: the pipe holds only whole ones
        if not token:
            return results, None
        (block,) = _TOKEN.unpack(token)
        try:
            results[block] = work(block)
        except Exception as exc:
            return results, (block, exc)


def _child(tokens: int, work: Callable[[int], Any], out: int) -> None:
    """A forked child's whole life: take blocks, send the results, exit without cleanup."""
    status = 1
    try:
        results, failure = _take(tokens, work)
        try:
            payload = pickle.dumps((results, failure), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # an exception (or result) that does not pickle: say what it was
            block, error = failure if failure else (min(results), exc)
            described = ResultsError(f"a parsing process failed: {type(error).__name__}: {error}")
            payload = pickle.dumps(({}, (block, described)), protocol=pickle.HIGHEST_PROTOCOL)
        with open(out, "wb", closefd=True) as pipe:
            pipe.write(payload)
        status = 0
    finally:
        os._exit(status)  # no atexit handlers, no flushing of the parent's inherited buffers


def run_blocks(count: int, work: Callable[[int], T], processes: int, finish: Callable[[list[T]], R]) -> R:
    """Run ``work(0)`` ... ``work(count - 1)`` in ``processes`` processes and ``finish`` their results.

    Parameters
    ----------
    count : int
        How many blocks, at most :data:`MAX_BLOCKS`.
    work : callable
        Runs one block; its result must pickle. Runs in forked children that
        inherit this process's state (Linux).
    processes : int
        This process and ``processes - 1`` forked children.
    finish : callable
        Called here with ``[work(0), ..., work(count - 1)]`` while the children
        exit (their exit, unmapping a copy of this process, takes milliseconds).

    Returns
    -------
    object
        What ``finish`` returned.

    Raises
    ------
    Exception
        What ``work`` raised for the lowest-numbered block that raised.
    """
    if not 0 <= count <= MAX_BLOCKS:
        raise ValueError(f"count must be 0..{MAX_BLOCKS}, not {count}")
    tokens, writer = os.pipe()
    children: list[tuple[int, int]] = []  # (pid, read end of its answer pipe; -1 once read)
    try:
        os.write(writer, b"".join(_TOKEN.pack(block) for block in range(count)))
        os.close(writer)  # empty and writerless: a read returns b"" (no more blocks)
        writer = -1
        for _ in range(processes - 1):
            answer, out = os.pipe()
            pid = os.fork()
            if pid == 0:
                _child(tokens, work, out)
            os.close(out)
            children.append((pid, answer))
        results, failure = _take(tokens, work)
        failures = [failure] if failure else []
        for index, (pid, answer) in enumerate(children):
            children[index] = (pid, -1)
            with open(answer, "rb", closefd=True) as pipe:
                payload = pipe.read()
            if payload:  # else the child died: its blocks are run again below
                theirs, failure = pickle.loads(payload)
                results.update(theirs)
                failures += [failure] if failure else []
        first = min(failures, key=lambda f: f[0]) if failures else None
        end = count if first is None else first[0]
        for block in range(end):
            if block not in results:  # taken by a child that died
                try:
                    results[block] = work(block)
                except Exception as exc:
                    first = (block, exc)
                    break
        if first is not None:
            raise first[1]
        return finish([results[block] for block in range(count)])
    finally:
        for pid, answer in children:
            if answer >= 0:  # not answered: this process is leaving on an exception
                os.close(answer)
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(tokens)
        if writer >= 0:
            os.close(writer)
