"""Every message header and ``apply_async`` option name the plugin uses, in one place.

Headers travel with a task message (to the worker, into the store, into a dead letter); options are
read by the sender from ``apply_async``/``send_task`` and never become message properties.
"""

from __future__ import annotations

#: The idempotency key a task was scheduled under (read by ``IdempotentTask`` on the worker).
IDEMPOTENCY_KEY = "zset_idempotency_key"
#: Epoch ms of a task's first failure, carried across retries for its dead-letter record.
FIRST_FAILURE = "zset_first_failure"
#: The ``eta`` of a task that waited in the store, as Celery wrote it. The dispatcher moves ``eta``
#: here when it publishes (a worker holds a message with an ``eta`` until its own clock reaches it,
#: and the store already waited by Redis time); an installed worker shows it as ``self.request.eta``.
ZSET_ETA = "zset_eta"
#: The periodic entry an occurrence belongs to (every occurrence carries it).
PERIODIC = "zset_periodic"
#: The entry's overlap policy, only on occurrences whose end the entry waits for (skip, buffer_one):
#: the worker reports their end so the next occurrence may run.
PERIODIC_OVERLAP = "zset_overlap"
#: Celery beat's own mark on the tasks it sends (kept, so code that looks for it still finds it).
CELERY_BEAT_TASK = "celery_beat_task"
#: Headers that record a failure history or a past schedule; a requeued dead letter starts afresh
#: without them.
FAILURE_HEADERS = (FIRST_FAILURE, ZSET_ETA)

#: ``apply_async(idempotency_key=...)``: one pending entry per key at schedule time.
IDEMPOTENCY_KEY_OPTION = "idempotency_key"
#: Replace the pending entry of the same id or key instead of keeping it.
REPLACE_OPTION = "zset_replace"
#: A callable that receives the stored form of the message instead of the store (bulk templates).
TEMPLATE_OPTION = "zset_template"
#: A :class:`list` the sender appends the store's answer to (the caller wants the existing handle).
OUTCOME_OPTION = "zset_outcome"
#: The ``eta`` header of a timed send the store takes, computed by the ``send_task`` wrapper, which
#: then sends the task without countdown/eta (so Celery routes it as an immediate task and applies
#: no native delayed delivery); the sender writes it into the message and stores it.
DUE_OPTION = "zset_due"
#: A callable the sender gives the routing and encoding of the message it stores (the lane keeps
#: them as the template of the calls of the same shape, :mod:`..celery.producer.lane`).
CAPTURE_OPTION = "zset_capture"
#: Every option above: removed before a message goes to the broker's own sender.
OPTIONS = (IDEMPOTENCY_KEY_OPTION, REPLACE_OPTION, TEMPLATE_OPTION, OUTCOME_OPTION, DUE_OPTION, CAPTURE_OPTION)

#: Properties a transport adds on delivery; not part of the message as it was sent.
TRANSPORT_PROPERTIES = ("delivery_info", "delivery_tag", "body_encoding")
