"""Plain, JSON-able views of stored tasks and dead letters, for the CLI and other front ends.

Only JSON bodies are decoded for display: a pickled body is never unpickled just to show it. A
compressed body is shown when the front end passes ``decompress`` (Kombu's, in the Celery layer).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..errors import PoisonMessage
from ..model.codec import JSON, StoredMessage, decode
from ..model.letters import DeadLetter
from ..model.times import iso
from ..store.entries import StoredEntry

Decompress = Callable[[bytes, str], bytes]


def body_view(message: StoredMessage, decompress: Decompress | None = None) -> dict[str, Any]:
    """``args``/``kwargs`` of a JSON body; the others say what they are instead."""
    view: dict[str, Any] = {"args": None, "kwargs": None, "body_bytes": len(message.body), "body_note": None}
    if message.content_type != JSON:
        view["body_note"] = f"{message.content_type} body not decoded"
        return view
    body = message.body
    try:
        compression = message.headers.get("compression")
        if compression:
            if decompress is None:
                view["body_note"] = f"{compression} compressed body not decoded"
                return view
            body = decompress(body, compression)
        data = json.loads(body.decode(message.content_encoding or "utf-8"))
    except Exception as exc:  # any codec error: show the rest of the entry anyway
        view["body_note"] = f"body not decodable: {exc}"
        return view
    if isinstance(data, list) and len(data) >= 2:  # protocol 2: [args, kwargs, embed]
        view["args"], view["kwargs"] = data[0], data[1]
    elif isinstance(data, dict):  # protocol 1
        view["args"], view["kwargs"] = data.get("args"), data.get("kwargs")
    return view


def message_view(message: StoredMessage, decompress: Decompress | None = None) -> dict[str, Any]:
    props = dict(message.properties)
    return {
        "task": message.task_name,
        **body_view(message, decompress),
        "headers": message.headers,
        "properties": props,
        "routing": {
            "exchange": message.exchange,
            "routing_key": message.routing_key,
            "queue": message.queue,
            "priority": props.get("priority"),
        },
        "content_type": message.content_type,
        "content_encoding": message.content_encoding,
    }


def summary_view(task_id: str, payload: bytes | None) -> dict[str, Any]:
    """What one row of a listing shows of a stored task: read from its headers, the body is not
    decoded (``argsrepr``/``kwargsrepr`` are Celery's own short forms of the arguments)."""
    try:
        if payload is None:
            raise PoisonMessage("the entry has no stored message")
        message = decode(task_id, payload)
    except PoisonMessage as exc:
        return {"task": None, "args": None, "kwargs": None, "retries": None, "queue": None, "error": str(exc)}
    headers = message.headers
    return {
        "task": message.task_name, "args": headers.get("argsrepr"), "kwargs": headers.get("kwargsrepr"),
        "retries": headers.get("retries") or 0, "queue": message.queue, "error": None,
    }


def entry_view(entry: StoredEntry, decompress: Decompress | None = None) -> dict[str, Any]:
    """A pending (or in-flight) task as ``celery zset show --json`` prints it."""
    view: dict[str, Any] = {
        "id": entry.task_id,
        "state": entry.state,
        "shard": entry.shard,
        "due_ms": entry.score_ms if entry.state == "pending" else None,
        "due": iso(entry.score_ms) if entry.state == "pending" else None,
        "lease_deadline_ms": entry.score_ms if entry.state == "inflight" else None,
        "stored_bytes": len(entry.payload or b""),
        "error": None,
    }
    try:
        if entry.payload is None:
            raise PoisonMessage("the entry has no stored message")
        view.update(message_view(decode(entry.task_id, entry.payload), decompress))
    except PoisonMessage as exc:
        view.update({"task": None, "error": str(exc)})
    return view


def letter_view(letter: DeadLetter, *, full: bool = True, decompress: Decompress | None = None) -> dict[str, Any]:
    """A dead letter; ``full`` adds the traceback, arguments and original message."""
    view: dict[str, Any] = {
        "id": letter.task_id,
        "task": letter.task_name,
        "reason": letter.reason,
        "exc_type": letter.exc_type,
        "exc_message": letter.exc_message,
        "attempts": letter.attempts,
        "dead_lettered_ms": letter.dead_lettered_ms,
        "dead_lettered": iso(letter.dead_lettered_ms),
    }
    if not full:
        return view
    view.update({
        "traceback": letter.traceback,
        "args": letter.args,
        "kwargs": letter.kwargs,
        "first_failure_ms": letter.first_failure_ms or None,
        "last_failure_ms": letter.last_failure_ms or None,
        "worker": letter.worker,
        "extra": letter.extra,
        "message": None,
        "error": None,
    })
    try:
        view["message"] = message_view(letter.original(), decompress)
    except (PoisonMessage, ValueError) as exc:
        view["error"] = str(exc)
    return view
