"""Encoding many calls of one shape: a message's encoding cut around its per-call values.

Bulk scheduling and the ``apply_async`` lane encode thousands of calls that differ from one
template only in id, argsrepr, kwargsrepr, body and ``eta``: the constant parts are cut once out of
the real :func:`~.codec.encode` of the template, so each call is a join of bytes, byte for byte
what :func:`~.codec.encode` gives for the full message.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .codec import EMBED_SUFFIX, StoredMessage, encode, json_bytes, simple_args
from .times import us_isoformat


class Template:
    """Encodes many messages that differ from one template only in id, argsrepr, kwargsrepr, body
    and ``eta``.

    Bulk scheduling calls :meth:`encode` once per task. The constant parts are cut out of the
    real :func:`encode` of the template (with marker values where the per-task ones go), so the
    result is byte for byte what :func:`encode` gives for the full message, at a fraction of the cost.
    The template's ``id``, ``root_id`` (when it is the task's own) and ``correlation_id`` must be
    its task id; each encoded task gets its own id the same way (that is how they are left out).
    A template with an ``eta`` takes each task's as epoch microseconds (written as UTC).
    """

    _ARGS, _KWARGS = "\x00zset-argsrepr\x00", "\x00zset-kwargsrepr\x00"
    _ETA_US = 9_999_999_999_999_999  # a marker no real eta has (the year 2286)

    def __init__(self, message: StoredMessage) -> None:
        headers = message.headers
        if "argsrepr" not in headers or "kwargsrepr" not in headers:
            raise ValueError("the template has no argsrepr/kwargsrepr headers")
        if headers.get("id") != message.task_id or message.properties.get("correlation_id") != message.task_id:
            raise ValueError("the template's id and correlation_id must be its task id")
        self.has_eta = headers.get("eta") is not None
        marks: dict[str, Any] = {"argsrepr": self._ARGS, "kwargsrepr": self._KWARGS}
        if self.has_eta:
            marks["eta"] = us_isoformat(self._ETA_US)
        marked = replace(message, headers={**headers, **marks}, body=b"\x00" + EMBED_SUFFIX)
        raw = encode(marked)
        meta, _ = raw.split(b"\n", 1)
        args_at = meta.index(json_bytes(self._ARGS))
        kwargs_at = meta.index(json_bytes(self._KWARGS))
        if not args_at < kwargs_at:
            raise ValueError("unexpected template layout")
        self._head = meta[:args_at]
        self._middle = meta[args_at + len(json_bytes(self._ARGS)):kwargs_at]
        rest = meta[kwargs_at + len(json_bytes(self._KWARGS)):] + b"\n"
        self._tail, self._after_eta = rest, b""
        if self.has_eta:
            mark = b",%d" % self._ETA_US
            if rest.count(mark) != 1:
                raise ValueError("unexpected template layout")
            at = rest.index(mark) + 1
            self._tail, self._after_eta = rest[:at], rest[at + len(mark) - 1:]
        # A simple call: the argsrepr slot's 0 and no kwargsrepr slot (what encode writes).
        self._simple_head = self._head + b"0"

    def encode(self, argsrepr: str, kwargsrepr: str, stripped_body: bytes, eta_us: int | None = None) -> bytes:
        """The encoding of the template with these values, for a body that ends with
        :data:`EMBED_SUFFIX`, given without it (the caller never builds the suffix at all)."""
        args = simple_args(argsrepr, kwargsrepr, stripped_body)
        if args is not None:
            parts = [self._simple_head, self._tail]
        else:
            if type(argsrepr) is not str or type(kwargsrepr) is not str:
                raise ValueError("argsrepr and kwargsrepr must be strings")
            parts = [self._head, json_bytes(argsrepr), self._middle, json_bytes(kwargsrepr), self._tail]
        if self.has_eta:
            if eta_us is None:
                raise ValueError("this template needs each task's eta")
            parts += (b"%d" % eta_us, self._after_eta)
        parts.append(stripped_body if args is None else args)
        return b"".join(parts)
