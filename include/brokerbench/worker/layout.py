"""Which clients one worker process runs for its job: the client layout of a phase."""

from __future__ import annotations

import math
from dataclasses import dataclass

from brokerbench.worker.job import Job, JobError, WorkerError

#: Target rates (msg/s, per worker process) of a throughput sweep when the job names none:
#: Confluent's fixed steps (10K ... 1M) with lower steps for Python clients.
SWEEP_RATES = [1_000, 5_000, 10_000, 20_000, 35_000, 50_000, 75_000, 100_000, 200_000, 500_000, 1_000_000]


@dataclass(frozen=True)
class ClientLayout:
    """The kind of the phase, its topics and partitions, the producers per topic and this process's total rate,
    the subscriptions its consumers read (a mixed workload's catch-up subscription apart), and its consumers'
    place in their subscriptions."""

    kind: str
    topics: list[str]
    partitions: int
    message_size: int
    duration_s: float
    interval_s: float
    #: producers per topic (none in a consumer-only phase)
    ppt: int
    #: consumers per subscription in this process (none in a producer-only phase)
    cps: int
    #: this process's total rate, msg/s (inf: unthrottled, a producer-only phase without a rate)
    rate: float
    #: the subscriptions the consumers read from their position (none without consumers)
    subs: list[str]
    #: a mixed workload's subscription that reads from the beginning, later in the phase
    catchup_sub: str | None
    #: a throughput sweep's target rates (empty in the other kinds)
    sweep_rates: list[float]
    #: the index of this process's first consumer in its subscriptions
    consumer_index_offset: int
    #: consumers per subscription over all processes (the job's; None: this process's)
    consumers_in_subscription: int | None

    @classmethod
    def of(cls, job: Job) -> ClientLayout:
        kind = job.workload.kind_of(job.kind)
        if job.workload.message_size is None:
            raise JobError("workload.messageSize: a phase needs it")
        subs = list(job.subscriptions)
        ppt, cps, rate = job.producers_per_topic, job.consumers_per_subscription, float(job.rate_msg_s)
        if kind == "consumer-only":
            ppt = 0
        if kind == "producer-only":
            cps = 0
            if rate <= 0:
                rate = math.inf  # unthrottled
        catchup_sub = None
        if kind == "mixed":
            if len(subs) < 2:
                raise WorkerError("a mixed workload needs subscriptionsPerTopic >= 2: "
                                  "tailing subscriptions plus the last one, which catches up")
            catchup_sub = f"{subs[-1]}-catchup-{job.phase}"
            subs = subs[:-1]
        sweep_rates = [float(r) for r in (job.sweep_rates_msg_s or SWEEP_RATES)] if kind == "throughput-sweep" else []
        return cls(kind=kind, topics=list(job.topics), partitions=job.workload.partitions_per_topic,
                   message_size=job.workload.message_size, duration_s=float(job.duration_s),
                   interval_s=float(job.interval_s), ppt=ppt, cps=cps, rate=rate, subs=subs if cps else [],
                   catchup_sub=catchup_sub, sweep_rates=sweep_rates, consumer_index_offset=job.consumer_index_offset,
                   consumers_in_subscription=job.consumers_in_subscription)

    @property
    def n_producers(self) -> int:
        return self.ppt * len(self.topics)

    @property
    def subscriptions_per_topic(self) -> int:
        """The subscriptions per topic this process reads, the catch-up one included."""
        return len(self.subs) + (1 if self.catchup_sub else 0)

    @property
    def consumers_per_subscription_total(self) -> int:
        """Consumers per subscription over all processes (for the partitions' assignment)."""
        return self.consumers_in_subscription or self.cps or 1

    def owns_subscriptions(self) -> bool:
        """Every consumer of this process's subscriptions is in this process: what it acknowledged is what its
        subscriptions must receive (with consumers of one subscription in several processes, one process's
        acknowledgements are read by others)."""
        return (self.consumers_in_subscription or self.cps) <= self.cps

    def target_rate(self) -> float | None:
        """The target rate the meta record gives: 0 without producers, a sweep's highest step, None unthrottled."""
        return (0 if not self.n_producers else
                max(self.sweep_rates) if self.kind == "throughput-sweep" else
                None if math.isinf(self.rate) else self.rate)

    def described_rate(self) -> str:
        return ("unthrottled" if math.isinf(self.rate) else f"{self.rate:,.0f} msg/s") \
            if self.kind != "throughput-sweep" else f"a sweep over {len(self.sweep_rates)} rates"
