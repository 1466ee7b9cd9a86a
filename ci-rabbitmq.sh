# Sourced from .ci/run (bash, set -euo pipefail), before `make test`.
#
# RabbitMQ for the broker tests. The suite starts a node of its own from the installed server's
# scripts (tests/support/rabbitmq.py: free loopback ports, its own epmd, cookie and data in a temp
# dir), so only the package is needed here: no service is started, none is left running.

ensure_rabbitmq_package() {
  if [ -n "${ZSET_RABBITMQ_SCRIPTS:-}" ] || [ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    return 0
  fi
  if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    echo "rabbitmq-server is not installed and cannot be (needs apt-get as root)"
    return 1
  fi
  # The package's postinst runs `invoke-rc.d rabbitmq-server start`, which on a machine without
  # systemd would start a system-wide node (and epmd). A policy-rc.d that refuses every start keeps
  # it from doing so; one we put there is removed again, one that was there already is kept.
  local policy=/usr/sbin/policy-rc.d made_policy="" rc=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"
    chmod 0755 "$policy"
    made_policy=1
  fi
  apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rabbitmq-server >/dev/null \
    || rc=$?
  if [ -n "$made_policy" ]; then rm -f "$policy"; fi
  return "$rc"
}

if [ "${ZSET_TEST_RABBITMQ:-auto}" != off ]; then
  ensure_rabbitmq_package || { echo "RabbitMQ for the tests: cannot install rabbitmq-server" >&2; exit 1; }
  # One start and stop of the suite's own node, so that a broken install fails here with its reason
  # instead of the whole RabbitMQ part of the suite being skipped. Needs the project's venv.
  make .venv/bin/.installed >/dev/null
  .venv/bin/python -m tests.support.rabbitmq check
fi
