"""Run a command with this process's wall clock shifted: ``python -m tests.support.skewed SECONDS celery ...``.

Patches ``time.time`` (and thereby ``datetime.now``-free code paths that use it) before the command
imports anything, like ``faketime`` would, so a dispatcher can be tested with a host clock that
is hours off. Monotonic time is left alone, as it is on a real host with a wrong clock.
"""

from __future__ import annotations

import runpy
import sys
import time

offset = float(sys.argv[1])
_real_time = time.time
time.time = lambda: _real_time() + offset  # type: ignore[assignment]
_real_time_ns = time.time_ns
time.time_ns = lambda: _real_time_ns() + int(offset * 1e9)  # type: ignore[assignment]
print(f"clock skewed by {offset:+.0f}s", flush=True)
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
