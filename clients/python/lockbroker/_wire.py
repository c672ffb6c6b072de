"""Wire format of lockbroker, without I/O: addresses, framing, encoding.

Turns a broker URL into a socket address, requests into lines and bytes
into decoded messages; it knows nothing of sockets, threads or event loops,
so the threaded and the asyncio client share it unchanged.

Invariants:

- a request line is one JSON object, UTF-8, ended by a single ``\\n``, never
  longer (without the ``\\n``) than the ``max_line`` the broker announced:
  :func:`encode` refuses it with :class:`LineTooLong` instead, because the
  broker answers such a line with ``"id": null`` and closes the session;
- :class:`LineBuffer` hands out only complete lines, in time linear in
  their length however many reads a line takes; a broker line longer than
  ``MAX_INCOMING`` is a sticky error (the stream cannot be trusted);
- blank lines are skipped, like the broker skips them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from .errors import InvalidArgument, LineTooLong

DEFAULT_UNIX = "/run/lockbroker/lockbroker.sock"
DEFAULT_TCP = "tcp://127.0.0.1:7380"
DEFAULT_MAX_LINE = 65536
MAX_INCOMING = 64 * 1024 * 1024


@dataclass(frozen=True)
class Address:
    """Where the broker listens: ``kind`` is "tcp" (host, port) or "unix" (path)."""

    kind: str
    host: str = ""
    port: int = 0
    path: str = ""

    def __str__(self) -> str:
        if self.kind == "unix":
            return f"unix://{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"tcp://{host}:{self.port}"


def default_url() -> str:
    """The broker lockctl would use: $LOCKBROKER_URL, else the default
    Unix socket if it exists, else tcp://127.0.0.1:7380."""
    env = os.environ.get("LOCKBROKER_URL")
    if env:
        return env
    if os.path.exists(DEFAULT_UNIX):
        return "unix://" + DEFAULT_UNIX
    return DEFAULT_TCP


def parse_url(url: str) -> Address:
    """Parses ``tcp://HOST:PORT`` (``[v6]:PORT`` for IPv6) or ``unix:///PATH``.

    Raises :class:`InvalidArgument` for anything else, as lockctl refuses it.
    """
    if not isinstance(url, str) or not url:
        raise InvalidArgument("empty broker URL")
    if url.startswith("unix://"):
        path = url[7:]
        if not path.startswith("/"):
            raise InvalidArgument(
                f"bad broker URL {url!r}: socket path must be absolute (unix:///PATH)")
        if path.endswith("/") or "?" in path or "#" in path:
            raise InvalidArgument(f"bad broker URL {url!r}: want unix:///PATH")
        return Address("unix", path=path)
    if url.startswith("tcp://"):
        rest = url[6:]
        if any(c in rest for c in "/?#@"):
            raise InvalidArgument(f"bad broker URL {url!r}: want tcp://HOST:PORT, nothing more")
        if rest.startswith("["):
            close = rest.find("]")
            host, tail = rest[1:close], rest[close + 1:]
            if close < 0 or not tail.startswith(":"):
                raise InvalidArgument(f"bad broker URL {url!r}: want tcp://[V6ADDR]:PORT")
            port_text = tail[1:]
        else:
            host, sep, port_text = rest.rpartition(":")
            if not sep or ":" in host:
                raise InvalidArgument(f"bad broker URL {url!r}: want tcp://HOST:PORT")
        if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise InvalidArgument(f"bad broker URL {url!r}: want tcp://HOST:PORT, port 1..65535")
        return Address("tcp", host=host, port=int(port_text))
    raise InvalidArgument(f"bad broker URL {url!r}: want tcp://HOST:PORT or unix:///PATH")


def read_secret(path: str) -> str:
    """The auth secret in a file, as the broker reads its own: the content
    without one trailing ``\\n`` or ``\\r\\n``."""
    with open(path, "rb") as f:
        data = f.read()
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    return data.decode("utf-8")


_raw_decode = json.JSONDecoder().raw_decode
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def encode(message: dict, max_line: int) -> bytes:
    """One request line, ``\\n`` included; raises :class:`LineTooLong` above
    ``max_line`` and :class:`InvalidArgument` for text that is not valid
    Unicode (a lone surrogate) or values JSON cannot carry."""
    try:
        line = _dumps(message).encode("utf-8")
    except (UnicodeEncodeError, TypeError, ValueError) as e:
        raise InvalidArgument(f"cannot encode the request: {e}", op=message.get("op")) from None
    if len(line) > max_line:
        raise LineTooLong(
            f"the request is {len(line)} bytes, longer than max_line ({max_line} bytes)",
            op=message.get("op"),
        )
    return line + b"\n"


class LineBuffer:
    """Splits a byte stream into decoded JSON messages.

    ``feed(data)`` returns the messages completed by ``data`` (each a dict, or
    any other JSON value the broker should never send); it raises
    ``ValueError`` for a line that is not JSON or is over ``MAX_INCOMING``,
    after which the stream is unusable.
    """

    __slots__ = ("_parts", "_size", "_failed")

    def __init__(self) -> None:
        self._parts: list = []  # the pieces of the unfinished line, joined once it ends
        self._size = 0
        self._failed = False  # a line was too long: every later feed fails too

    def _too_long(self):
        self._failed = True
        self._parts = []
        return ValueError("a line from the broker is longer than 64 MiB")

    def feed(self, data: bytes) -> list:
        if self._failed:
            raise ValueError("the stream from the broker is unusable (a line was too long)")
        nl = data.find(b"\n")
        if nl < 0:
            self._size += len(data)
            if self._size > MAX_INCOMING:
                raise self._too_long()
            if data:
                self._parts.append(data)
            return []
        if self._size + nl > MAX_INCOMING:
            raise self._too_long()
        if self._parts:
            self._parts.append(data)
            data = b"".join(self._parts)
            self._parts = []
        lines = data.split(b"\n")
        tail = lines.pop()
        self._size = len(tail)
        if tail:
            self._parts.append(tail)
        out = []
        for line in lines:
            # The usual line, one object and nothing around it, goes straight
            # to the scanner (json.loads would first sniff the encoding and
            # skip whitespace); anything else gets json.loads' full rules.
            text = line.decode("utf-8", "surrogatepass")  # as json.loads decodes UTF-8
            if text[:1] == "{" and text[-1:] == "}":
                msg, end = _raw_decode(text)
                if end == len(text):
                    out.append(msg)
                    continue
            if line.strip():
                out.append(json.loads(line))
        return out
