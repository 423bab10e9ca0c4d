"""Publish-delay p99 of kafka-python at 1,000 msg/s with GIL switch intervals of 5 ms (Python's default) and 1 ms.

    cd bench && ../.venv/bin/python switch_interval.py
"""

import tempfile

from _common import brokers, job

from brokerbench.worker.runner import prepare_job, run_job

with brokers(["kafka"]) as eps:
    for sw in (0.005, 0.001, 0.005, 0.001):
        j = job("kafka", eps["kafka"], "kafka-python", rate=1000, duration_s=5, interval_s=5, switch_interval_s=sw)
        prepare_job(j)
        r = run_job(j, tempfile.mktemp(suffix=".jsonl"), progress=lambda _s: None)
        print("kafka-python 1000 msg/s switch_interval_s", sw, "publish_delay_p99_us",
              r["validity"]["publish_delay_p99_us"], flush=True)
