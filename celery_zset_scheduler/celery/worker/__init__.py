"""The worker: what an installed app's ``celery worker`` does differently. Requests that fail for
good and unknown task names go to the dead-letter store, Celery's revoked set follows the store's
durable revokes, overlap policies hear when an occurrence ends, and the task base classes
(retries that wait in the store, idempotency keys).

Run by ``celery worker``, hooked on Celery's signals and bootsteps by ``install(app)``. Imports
:mod:`..core` and the layers below; not the producer or any other role.
"""
