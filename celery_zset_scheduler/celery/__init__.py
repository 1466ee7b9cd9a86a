"""Everything that imports Celery, by the process that runs it.

Roles (each a subpackage; its docstring says which process runs it and what it may import):

- :mod:`.core`: what every process shares (the per-app installation, Celery's messages in the
  store's form, version differences, signals);
- :mod:`.producer`: the app's process that sends tasks (``apply_async``, ``send_task``,
  ``schedule_many``, revokes, the Python API);
- :mod:`.worker`: the ``celery worker`` process (dead letters, durable revokes, task base classes);
- :mod:`.periodic`: periodic entries (the runtime API any process calls, and the planner the
  dispatcher runs);
- :mod:`.publishers`: how the dispatcher hands stored messages to the broker;
- :mod:`.backlog`: ``celery zset import-eta``, moving a broker's native ETA backlog into the store;
- :mod:`.dispatcher`: building and running a dispatcher (``celery zset run``, ``beat -S zset``);
- :mod:`.cli`: the ``celery zset`` commands.

:mod:`.install` (``install(app)``) wires the producer and worker roles to an app. The import
contract (``lint-imports``) keeps the roles in layers: ``cli`` over ``install`` and ``dispatcher``,
over ``backlog``, ``periodic`` and ``publishers``, over ``producer`` and ``worker``, over ``core``;
roles of one layer do not import each other.
"""
