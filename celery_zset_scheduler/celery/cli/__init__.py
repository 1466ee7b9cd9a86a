"""``celery -A proj zset ...``: registered under the ``celery.commands`` entry point group.

Run by the ``celery`` command (and the Django ``zset`` management command). The top of the layer:
it may import every other role.
"""

from __future__ import annotations

from .acl import acl
from .actions import cancel, reschedule, run_now
from .bench import bench
from .dlq import dlq
from .docs import docs
from .doctor import doctor
from .group import zset
from .import_beat import import_beat
from .import_eta import import_eta
from .pending import ls, show
from .periodic import periodic
from .reshard import reshard_command
from .run import run
from .status import status

for command in (status, ls, show, cancel, reschedule, run_now, run, doctor, dlq, periodic, import_beat, import_eta,
                reshard_command, bench, docs, acl):
    zset.add_command(command)

__all__ = ["zset"]
