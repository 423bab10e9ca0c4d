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

import time
from typing import NamedTuple

from brokerbench.worker.job import Job


class Share(NamedTuple):
    """One process's part of a job: its producers per topic and consumers per subscription, the index of its
    first consumer in the subscription, its rate (msg/s) and its weight (its share of the job's rate)."""

    producers_per_topic: int
    consumers_per_subscription: int
    consumer_index_offset: int
    rate_msg_s: float
    weight: float


def _share(total: int, parts: int, index: int) -> int:
    return total // parts + (1 if index < total % parts else 0)


def shares(producers_per_topic: int, consumers_per_subscription: int, rate_msg_s: float,
           total: int) -> list[Share | None]:
    """Each of ``total`` processes' :class:`Share` of a job (None: a process with neither producers nor consumers,
    not started)."""
    ppt, cps, rate = producers_per_topic, consumers_per_subscription, rate_msg_s
    out: list[Share | None] = []
    consumer_offset = 0
    for g in range(total):
        producers = (1 if ppt else 0) if ppt < total else _share(ppt, total, g)
        weight = (producers / total if ppt < total else producers / ppt) if ppt else 0
        consumers = _share(cps, total, g)
        if not producers and not consumers:
            out.append(None)
            continue
        out.append(Share(producers, consumers, consumer_offset,
                         rate * weight / (1 if ppt >= total else producers or 1), weight))
        consumer_offset += consumers
    return out


def split_job(job: Job, processes: int = 1, hosts: list[str] | None = None,
              start_at_ns: int | None = None, start_lead_s: float = 15.0) -> list[Job]:
    """The per-process jobs of ``job`` over ``processes`` processes on each host of ``hosts``."""
    hosts = hosts or ["localhost"]
    processes = max(1, int(processes))
    total = processes * len(hosts)
    if total == 1:
        return [job.with_(worker=f"{hosts[0]}-0")]
    at = start_at_ns or job.start_at_ns or time.time_ns() + int(start_lead_s * 1e9)
    out = []
    for g, share in enumerate(shares(job.producers_per_topic, job.consumers_per_subscription, job.rate_msg_s,
                                     total)):
        if share is None:
            continue
        changes = dict(worker=f"{hosts[g // processes]}-{g % processes}",
                       producers_per_topic=share.producers_per_topic,
                       consumers_per_subscription=share.consumers_per_subscription,
                       consumer_index_offset=share.consumer_index_offset,
                       consumers_in_subscription=job.consumers_per_subscription, rate_msg_s=share.rate_msg_s,
                       start_at_ns=at)
        if job.sweep_rates_msg_s:
            changes["sweep_rates_msg_s"] = [r * share.weight for r in job.sweep_rates_msg_s]
        out.append(job.with_(**changes))
    return out
