"""The producer: the app's own process sending tasks. A timed ``apply_async``/``send_task`` is
stored rather than published (the lane, the ``send_task`` wrapper, the sender), ``schedule_many``
streams many, revokes cancel or record ids in the store, and the Python API looks up, cancels and
reschedules.

Run by any process that sends tasks (web servers, scripts, workers sending subtasks). Imports
:mod:`..core` and the layers below; not the worker, periodic, publisher or dispatcher roles.
"""
