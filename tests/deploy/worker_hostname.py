"""``[core] hostname_callable`` of the deployment test's Celery workers: each reports its own name.

Both workers run on this one machine; naming them apart lets the test see
which worker ran which task (the task instance's ``hostname``).
"""

import os
import socket


def hostname() -> str:
    return os.environ.get("BROKERBENCH_DEPLOY_WORKER") or socket.getfqdn()
