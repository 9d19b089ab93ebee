"""The agent's protocol: length-prefixed JSON messages over a pair of byte streams.

A message is a 4-byte big-endian length, then that many bytes of UTF-8 JSON
(an object). Either side refuses a length above its limit before reading
the body, so a peer that sends endlessly costs at most one limit of memory.
Nothing is in-band: a file's text is a JSON string, never a marker away
from the next answer.

The agent speaks first: ``{"hello": "iobench-agent", "version": N, ...}``.
A controller that speaks another version refuses it with a message naming
both. Then the controller sends requests ``{"id": n, "op": name, "args":
{...}}`` and the agent answers each in order with ``{"id": n, "ok": true,
"value": ...}`` or ``{"id": n, "ok": false, "error": words}``.

The streams are any pair of file descriptors: an SSH session's pipes, a
subprocess's, or another launcher's; nothing here assumes SSH.

This module is sent to hosts: standard library only, Python 3.9 syntax.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

VERSION = 1
HELLO = "iobench-agent"
MAX_MESSAGE = 32 << 20
"""The most bytes one message may hold, either way (a snapshot of a large host is a few MB)."""
_HEADER = struct.Struct(">I")


class ProtocolError(Exception):
    """The peer broke the protocol, ended, or did not answer in time."""


def encode(message: dict[str, Any]) -> bytes:
    """A message's bytes: its length, then its JSON."""
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogateescape")
    if len(body) > MAX_MESSAGE:
        raise ProtocolError(f"a message of {len(body)} bytes is over the limit of {MAX_MESSAGE}")
    return _HEADER.pack(len(body)) + body


def write_message(fd: int, message: dict[str, Any]) -> None:
    """Write one message to a file descriptor, whole."""
    data = memoryview(encode(message))
    while data:
        done = os.write(fd, data)
        data = data[done:]


class Reader:
    """Reads messages from a file descriptor, each bounded in size and, with a deadline, in time."""

    def __init__(self, fd: int, limit: int = MAX_MESSAGE) -> None:
        self.fd = fd
        self.limit = limit
        self.buffer = b""

    def _fill(self, want: int, deadline: float | None) -> None:
        while len(self.buffer) < want:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                    raise ProtocolError("no answer in time")
            chunk = os.read(self.fd, max(1 << 16, min(want - len(self.buffer), 1 << 20)))
            if not chunk:
                raise ProtocolError("the stream ended")
            self.buffer += chunk

    def read(self, timeout: float | None = None) -> dict[str, Any]:
        """The next message (a dict); ``timeout`` seconds at most for all of it (None: wait)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._fill(_HEADER.size, deadline)
        (size,) = _HEADER.unpack(self.buffer[: _HEADER.size])
        if size > self.limit:
            raise ProtocolError(f"a message of {size} bytes is over the limit of {self.limit}")
        self._fill(_HEADER.size + size, deadline)
        body = self.buffer[_HEADER.size : _HEADER.size + size]
        self.buffer = self.buffer[_HEADER.size + size :]
        try:
            message = json.loads(body.decode("utf-8", "surrogateescape"))
        except ValueError:
            raise ProtocolError("a message that is not JSON") from None
        if not isinstance(message, dict):
            raise ProtocolError("a message that is not a JSON object")
        return message


def hello_problem(message: dict[str, Any]) -> str | None:
    """Why a first message is not an agent's hello of this version (None when it is)."""
    if message.get("hello") != HELLO:
        return "it did not greet as an iobench agent"
    if message.get("version") != VERSION:
        return f"its agent speaks protocol version {message.get('version')!r}, this iobench's {VERSION}"
    return None


class Channel:
    """The controller's end: one request at a time, each answer checked and bounded in time.

    Not thread-safe by itself; the caller serialises requests.
    """

    def __init__(self, read_fd: int, write_fd: int, limit: int = MAX_MESSAGE) -> None:
        self.reader = Reader(read_fd, limit)
        self.write_fd = write_fd
        self.hello: dict[str, Any] | None = None
        self.next_id = 0

    def greet(self, timeout: float) -> dict[str, Any]:
        """Read the agent's hello; raise ProtocolError unless it is this version's."""
        hello = self.reader.read(timeout)
        problem = hello_problem(hello)
        if problem is not None:
            raise ProtocolError(problem)
        self.hello = hello
        return hello

    def call(self, op: str, args: dict[str, Any], timeout: float) -> Any:
        """Send a request and wait for its answer; the value, or ``AgentError`` with the agent's words."""
        self.next_id += 1
        try:
            write_message(self.write_fd, {"id": self.next_id, "op": op, "args": args})
        except OSError as exc:
            raise ProtocolError(f"the stream closed ({exc.strerror})") from None
        answer = self.reader.read(timeout)
        if answer.get("id") != self.next_id:
            raise ProtocolError(f"an answer to request {answer.get('id')!r} where {self.next_id} was due")
        if answer.get("ok") is True:
            return answer.get("value")
        raise AgentError(str(answer.get("error", "no reason given"))[:2000])


class AgentError(Exception):
    """The agent answered a request with an error (its words)."""
