"""The dispatcher process: a dispatcher built from a Celery app (its publisher for the broker, the
periodic planner, revoked ids marked in the result backend), run by ``celery zset run`` or by
Celery beat with ``-S zset``.

Run by ``celery zset run`` and ``celery beat -S zset``. Imports :mod:`..publishers`,
:mod:`..periodic`, :mod:`..producer` (a revoked id's result state), :mod:`..core` and the layers
below (``dispatch`` runs the loop); not the worker, backlog, install or the CLI.
"""
