"""Many commands in one round trip on a pooled connection, their replies read a buffer at a time.

redis-py's pure-Python reply reader costs a few function calls and a buffered ``readline`` per
element: most of the Python time of a claim, whose reply holds three elements an entry. Here the
replies are read off the socket in large chunks and parsed from the bytes (RESP2 and RESP3, as
redis-py returns them without ``decode_responses``: bulk strings as bytes, errors as redis-py's
exception classes in place of the reply). Used only where redis-py's own parser is the
pure-Python one with nothing buffered (no hiredis, which is as fast) and the start-up check of the
connection's private attributes passed (:mod:`..model.internals`); otherwise each reply is read
by redis-py. A connection that fails mid-way is dropped and the error raised: which of the
commands ran is then unknown, as with redis-py's pipeline.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator, Sequence
from typing import Any

import redis

from ..model.internals import Internal, register, usable
from .connections import checkout

CHUNK = 1 << 20
#: redis-py's pure-Python readers (a RESP3 push message between the replies is skipped, as
#: redis-py hands it to its push handler and reads on).
_PURE_PARSERS = frozenset({"_RESP2Parser", "_RESP3Parser"})


def pack(commands: Sequence[tuple[Any, ...]]) -> bytes | None:
    """The RESP form of ``commands`` when every argument is bytes, str or int (what script calls
    pass), else None (redis-py packs them then): a few µs instead of redis-py's generic packing.
    Bytes (most arguments: envelopes, members) are packed in the comprehension itself."""
    out: list[bytes] = []
    try:
        for command in commands:
            out.append(b"*%d\r\n" % len(command))
            out += [b"$%d\r\n%b\r\n" % (len(arg), arg) if type(arg) is bytes else _packed(arg) for arg in command]
    except _Unpackable:
        return None
    return b"".join(out)


class _Unpackable(Exception):
    """An argument of a type :func:`pack` leaves to redis-py."""


def _packed(arg: Any) -> bytes:
    kind = type(arg)
    if kind is str:
        value = arg.encode("utf-8")
    elif kind is int:
        value = b"%d" % arg
    else:
        raise _Unpackable
    return b"$%d\r\n%b\r\n" % (len(value), value)


def exchange(client: redis.Redis, commands: Sequence[tuple[Any, ...]]) -> list[Any] | None:
    """The replies to ``commands`` sent at once, in order, each a value or the error it met; None
    when an argument is of a type the packer leaves to redis-py (nothing was sent)."""
    sent = send(client, commands)
    return None if sent is None else sent.replies()


def send(client: redis.Redis, commands: Sequence[tuple[Any, ...]]) -> Sent | None:
    """``commands`` written at once on a pooled connection kept for their replies, which
    :meth:`Sent.replies` reads (the caller works meanwhile); None as for :func:`exchange`."""
    packed = pack(commands)
    if packed is None:
        return None
    pool = client.connection_pool
    conn: Any = checkout(pool)
    try:
        conn.send_packed_command([packed])
    except BaseException:
        conn.disconnect()
        pool.release(conn)
        raise
    return Sent(pool, conn, len(commands))


class Sent:
    """Commands written on a connection of their own, their replies not read yet."""

    def __init__(self, pool: Any, conn: Any, count: int) -> None:
        self._pool, self._conn, self._count = pool, conn, count

    def replies(self) -> list[Any]:
        """Each command's reply (a value or its error), in order; the connection goes back to the
        pool (dropped if reading failed: which of the commands ran is then unknown)."""
        try:
            replies = read_replies(self._conn, self._count)
        except BaseException:
            self._conn.disconnect()
            self._pool.release(self._conn)
            raise
        self._pool.release(self._conn)
        return replies


def _reader_differs() -> str | None:
    conn: Any = redis.Connection()  # type: ignore[no-untyped-call]  # not connected: nothing is opened
    parser = getattr(conn, "_parser", None)
    if parser is None or not hasattr(conn, "_sock"):
        return "redis-py's Connection has no _parser or _sock"
    if type(parser).__name__ in _PURE_PARSERS:
        if "_buffer" not in getattr(parser, "__dict__", {}):
            return f"{type(parser).__name__} has no _buffer"
        if not callable(getattr(parser, "parse_error", None)):
            return f"{type(parser).__name__} has no parse_error"
    from redis._parsers.socket import SocketBuffer

    if not callable(getattr(SocketBuffer, "unread_bytes", None)):
        return "redis-py's SocketBuffer has no unread_bytes"
    return None


READER = register(Internal(
    "the chunked reply reader",
    ("redis.connection.Connection._parser", "redis.connection.Connection._sock",
     "redis._parsers.resp2._RESP2Parser._buffer"),
    "each reply read by redis-py's pure-Python parser: more dispatcher CPU a claimed task without "
    "hiredis (docs/design.md#private-internals; none with hiredis, which is as fast)",
    _reader_differs,
))


def read_replies(conn: Any, count: int) -> list[Any]:
    """The next ``count`` replies on ``conn`` (a redis-py connection), each a value or its error."""
    if usable(READER):
        parser = conn._parser
        buffered = getattr(parser, "_buffer", None)
        if type(parser).__name__ in _PURE_PARSERS and buffered is not None and not buffered.unread_bytes():
            return _Reader(conn._sock, parser).replies(count)
    return [_read_one(conn) for _ in range(count)]


def _read_one(conn: Any) -> Any:
    try:
        return conn.read_response()
    except redis.ResponseError as exc:
        return exc


@contextlib.contextmanager
def _read_errors() -> Iterator[None]:
    """A socket error as redis-py raises it."""
    try:
        yield
    except TimeoutError as exc:
        raise redis.TimeoutError("Timeout reading from socket") from exc
    except OSError as exc:
        raise redis.ConnectionError(f"Error while reading from socket: {exc}") from exc


def _check_open(received: int) -> None:
    if not received:
        raise redis.ConnectionError("Connection closed by server.")


class _Reader:
    """Replies parsed off one buffer that grows as the socket delivers: a reply that arrives in
    pieces is parsed once, each element as soon as its bytes are in (never parsed again from its
    start when the next piece comes)."""

    def __init__(self, sock: socket.socket, parser: Any) -> None:
        self.sock = sock
        self.parser = parser  # for redis-py's error classes
        self.buf = b""

    def _more(self) -> bytes:
        """The buffer with what the socket has added to it (positions in it stay valid)."""
        with _read_errors():
            chunk = self.sock.recv(CHUNK)
        _check_open(len(chunk))
        self.buf += chunk
        return self.buf

    def _line(self, pos: int) -> int:
        """The position of the CRLF ending the line at ``pos``, read in if need be."""
        nl = self.buf.find(b"\r\n", pos)
        while nl < 0:
            start = max(pos, len(self.buf) - 1)  # a CR at the end may be the new data's CRLF
            nl = self._more().find(b"\r\n", start)
        return nl

    def _upto(self, end: int) -> bytes:
        """The buffer, holding at least ``end`` bytes: a large missing part (a big bulk string)
        read into one buffer of its size, not grown a chunk at a time (which copies it over and
        over: seconds for 100 MB)."""
        buf = self.buf
        missing = end - len(buf)
        if missing > CHUNK:
            part = bytearray(missing)
            view = memoryview(part)
            got = 0
            while got < missing:
                got += self._into(view[got:])
            buf = self.buf = b"".join((buf, part))
        while len(buf) < end:
            buf = self._more()
        return buf

    def _into(self, view: memoryview) -> int:
        with _read_errors():
            n = self.sock.recv_into(view)
        _check_open(n)
        return n

    def replies(self, count: int) -> list[Any]:
        out: list[Any] = []
        pos = 0
        while len(out) < count:
            if pos >= len(self.buf):
                self._more()
            if pos > CHUNK:  # drop the replies read: what is kept is at most one reply and a read
                self.buf = self.buf[pos:]
                pos = 0
            push = self.buf[pos] == 62
            value, pos = self._parse(pos)
            if not push:
                out.append(value)
        if pos != len(self.buf):  # more than was asked for: the connection is out of step
            raise redis.ConnectionError("unexpected data after the replies")
        return out

    def _parse(self, pos: int) -> tuple[Any, int]:
        nl = self._line(pos)
        buf = self.buf
        kind = buf[pos]
        if kind == 36:  # $ bulk string
            n = int(buf[pos + 1:nl])
            if n < 0:
                return None, nl + 2
            end = nl + 2 + n
            buf = self._upto(end + 2)
            return buf[nl + 2:end], end + 2
        if kind in (42, 126, 62):  # * array, ~ set, > push
            n = int(buf[pos + 1:nl])
            if n < 0:
                return None, nl + 2
            return self._array(n, nl + 2)
        if kind == 58 or kind == 40:  # : integer, ( big number
            return int(buf[pos + 1:nl]), nl + 2
        if kind == 43:  # + simple string
            return buf[pos + 1:nl], nl + 2
        if kind == 45:  # - error
            return self.parser.parse_error(buf[pos + 1:nl].decode("utf-8", errors="replace")), nl + 2
        if kind == 95:  # _ null
            return None, nl + 2
        if kind == 44:  # , double
            return float(buf[pos + 1:nl]), nl + 2
        if kind == 35:  # # boolean
            return buf[pos + 1:nl] == b"t", nl + 2
        if kind == 61 or kind == 33:  # = verbatim string (its 4-byte format first), ! bulk error
            n = int(buf[pos + 1:nl])
            end = nl + 2 + n
            data = self._upto(end + 2)[nl + 2:end]
            if kind == 33:
                return self.parser.parse_error(data.decode("utf-8", errors="replace")), end + 2
            return data[4:], end + 2
        if kind == 37 or kind == 124:  # % map, | attribute (metadata before the reply: skipped)
            n = int(buf[pos + 1:nl])
            pos = nl + 2
            mapping: dict[Any, Any] = {}
            for _ in range(n):
                key, pos = self._parse(pos)
                mapping[key], pos = self._parse(pos)
            if kind == 124:
                return self._parse(pos)
            return mapping, pos
        raise redis.ConnectionError(f"unexpected reply type {chr(kind)!r}")

    def _array(self, n: int, pos: int) -> tuple[list[Any], int]:
        """The ``n`` elements from ``pos``: bulk strings and integers (most elements of a claim's
        reply) read inline while their bytes are in, anything else (or at the buffer's end) by
        :meth:`_parse`."""
        buf = self.buf
        size = len(buf)
        find = buf.find
        items: list[Any] = []
        append = items.append
        for _ in range(n):
            if pos < size:
                kind = buf[pos]
                nl = find(b"\r\n", pos)
                if kind == 36 and nl > 0:  # a bulk string
                    length = int(buf[pos + 1:nl])
                    end = nl + 2 + length
                    if length >= 0 and end + 2 <= size:
                        append(buf[nl + 2:end])
                        pos = end + 2
                        continue
                elif kind == 58 and nl > 0:  # an integer
                    append(int(buf[pos + 1:nl]))
                    pos = nl + 2
                    continue
            value, pos = self._parse(pos)
            append(value)
            buf = self.buf
            size = len(buf)
            find = buf.find
        return items, pos
