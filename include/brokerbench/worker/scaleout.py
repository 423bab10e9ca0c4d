"""Scale-out: one workload's job split over N processes on each of M client hosts.

Process ``g`` (``host_index * processes + p``, numbered over all hosts) gets:

- producers: its share of ``producers_per_topic`` (an even split, the first
  ones one more); when there are fewer producers than processes, every
  process runs one producer per topic, so the load is spread over all of
  them (the meta record names what each process ran);
- rate: the total rate in proportion to its producers;
- consumers: its share of ``consumers_per_subscription``, with
  ``consumer_index_offset`` / ``consumers_in_subscription`` so that
  partitions (RabbitMQ queues) are assigned over all consumers of a
  subscription; the number of consumers is never raised;
- ``start_at_ns``: one wall-clock instant for every process (synchronized
  start; hosts' clocks are kept in sync by host setup).

Processes left with neither producers nor consumers are not started. Every
process is named ``<host>-<p>`` and writes its own result file; the merge
happens in Spark.
"""

from __future__ import annotations

import copy
import time
from typing import Any


def _share(total: int, parts: int, index: int) -> int:
    return total // parts + (1 if index < total % parts else 0)


def split_job(job: dict[str, Any], processes: int = 1, hosts: list[str] | None = None,
              start_at_ns: int | None = None, start_lead_s: float = 15.0) -> list[dict[str, Any]]:
    """The per-process jobs of ``job`` over ``processes`` processes on each host of ``hosts``."""
    hosts = hosts or ["localhost"]
    processes = max(1, int(processes))
    total = processes * len(hosts)
    if total == 1:
        return [dict(job, worker=f"{hosts[0]}-0")]
    ppt = int(job.get("producers_per_topic", 0))
    cps = int(job.get("consumers_per_subscription", 0))
    rate = float(job.get("rate_msg_s", 0))
    at = start_at_ns or job.get("start_at_ns") or time.time_ns() + int(start_lead_s * 1e9)
    out, consumer_offset = [], 0
    for g in range(total):
        host, p = hosts[g // processes], g % processes
        producers = (1 if ppt else 0) if ppt < total else _share(ppt, total, g)
        weight = (producers / total if ppt < total else producers / ppt) if ppt else 0
        consumers = _share(cps, total, g)
        if not producers and not consumers:
            continue
        j = copy.deepcopy(job)
        j.update(worker=f"{host}-{p}", producers_per_topic=producers, consumers_per_subscription=consumers,
                 consumer_index_offset=consumer_offset, consumers_in_subscription=cps,
                 rate_msg_s=rate * weight / (1 if ppt >= total else producers or 1), start_at_ns=at)
        if j.get("sweep_rates_msg_s"):
            j["sweep_rates_msg_s"] = [r * weight for r in j["sweep_rates_msg_s"]]
        consumer_offset += consumers
        out.append(j)
    return out
