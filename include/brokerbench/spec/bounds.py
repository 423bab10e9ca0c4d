"""The largest value brokerbench accepts for every number and name in a spec file, and why.

Every bound is a :class:`Bound`: its value, its unit and the reason it is
what it is. The spec models use them (through :func:`at_most`) and refuse a
larger value with a message naming the field, the bound and the reason::

    include/workloads/w.yaml: field 'messageSize': must be <= 134,217,728 bytes (128 MiB) (got 2000000000): ...

docs/specs.md ("Bounds") lists exactly :func:`markdown_table` (a test keeps
the two the same). The run parameters (spec/params.py) may import the same
constants, e.g. ``MAX_PRODUCER_RATE.value`` as a JSON schema ``maximum``.

Lower bounds (``>= 1``, ``> 0``) stay on the fields themselves; they need no
reason. Non-finite numbers (``.nan``, ``.inf`` in YAML, ``"inf"``) are refused
everywhere: by :func:`reject_non_finite` when a file is read, and by every
model (``allow_inf_nan=False``) when a spec is built in code.

This module is a leaf of the spec package: it imports none of its siblings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator

KiB = 1024
MiB = 1024 * KiB


@dataclass(frozen=True)
class Bound:
    """The largest accepted value of some fields, with its unit and the reason for it."""

    #: the constant's name in this module (shown in docs/specs.md)
    name: str
    value: int | float
    #: "bytes", "msg/s", "minutes", "characters", ... ("" for a plain count)
    unit: str
    #: where the bound applies: ``<kind>.<field>`` in the files' own spelling
    fields: tuple[str, ...]
    #: why this value: shown in every refusal and in the docs
    reason: str
    #: a friendlier spelling of the value, e.g. "128 MiB" (optional)
    human: str = ""

    def text(self) -> str:
        """The bound as users read it: ``134,217,728 bytes (128 MiB)``."""
        value = f"{self.value:,}" if isinstance(self.value, int) else f"{self.value:g}"
        out = f"{value} {self.unit}".strip()
        return f"{out} ({self.human})" if self.human else out

    def refusal(self, got: Any) -> str:
        """The message for a value above the bound."""
        if isinstance(got, float) and got.is_integer():
            got = int(got)  # 1e12 reads as 1000000000000, not 1000000000000.0
        return f"must be <= {self.text()} (got {got!r}): {self.reason}"


# -- names and text ---------------------------------------------------------------

MAX_NAME_LENGTH = Bound(
    "MAX_NAME_LENGTH", 200, "characters",
    ("workload.name", "driver.name", "variant.name", "suite.name"),
    "names become parts of result paths (most file systems allow 255 bytes per path segment) and a suite's "
    "name becomes the DAG id brokerbench_<name> (Airflow allows 250 characters)")

MAX_TAG_LENGTH = Bound(
    "MAX_TAG_LENGTH", 100, "characters", ("suite.tags[]",),
    "tags become Airflow DAG tags, which Airflow stores in 100 characters")

MAX_DESCRIPTION_LENGTH = Bound(
    "MAX_DESCRIPTION_LENGTH", 10_000, "characters",
    ("suite.description", "variant.description", "variant.durabilityLevel"),
    "free text shown in reports and the DAG's documentation: a few paragraphs at most")

# -- workloads ----------------------------------------------------------------------

MAX_TOPICS = Bound(
    "MAX_TOPICS", 10_000, "", ("workload.topics",),
    "every topic is created (with its partitions, producers and consumers) before the test starts: beyond "
    "10,000 the run measures topic creation rather than the broker")

MAX_PARTITIONS_PER_TOPIC = Bound(
    "MAX_PARTITIONS_PER_TOPIC", 10_000, "", ("workload.partitionsPerTopic",),
    "Kafka's long-standing advice is at most 4,000 partitions per broker; RabbitMQ creates one queue per "
    "partition; 10,000 in one topic is beyond what a benchmark cluster serves")

MAX_TOTAL_PARTITIONS = Bound(
    "MAX_TOTAL_PARTITIONS", 1_000_000, "", ("workload.topics x partitionsPerTopic",),
    "partitions of the whole workload: Kafka advised at most 200,000 per cluster before KRaft, and KRaft "
    "targets a few million; a run creating more spends its time creating them")

MAX_CLIENTS_PER_TOPIC = Bound(
    "MAX_CLIENTS_PER_TOPIC", 1_000, "",
    ("workload.producersPerTopic", "workload.subscriptionsPerTopic", "workload.consumerPerSubscription"),
    "each producer and consumer is a broker connection (or channel) the workers open; 1,000 per "
    "topic is far more than OMB's shipped workloads use")

MAX_TOTAL_CLIENTS = Bound(
    "MAX_TOTAL_CLIENTS", 100_000, "",
    ("workload.topics x (producersPerTopic + subscriptionsPerTopic x consumerPerSubscription)",),
    "producers and consumers of the whole workload, each an open connection held by the worker processes: "
    "more exceeds the file descriptors a worker host allows (65,536 per process is a common limit)")

MAX_MESSAGE_SIZE = Bound(
    "MAX_MESSAGE_SIZE", 128 * MiB, "bytes",
    ("workload.messageSize", "workload.payloadFile (its size)", "driver.producer.batchingMaxBytes"),
    "the largest limit any of the three brokers has by default: RabbitMQ's max_message_size (128 MiB from "
    "3.8; its hard limit is 512 MiB); Kafka's message.max.bytes is about 1 MiB and Pulsar's maxMessageSize "
    "5 MiB by default, so a larger message needs brokers configured past every default",
    human="128 MiB")

MAX_PAYLOAD_POOL_SIZE = Bound(
    "MAX_PAYLOAD_POOL_SIZE", 100_000, "payloads", ("workload.randomizedPayloadPoolSize",),
    "every producer process builds the whole pool before the load starts (brokerbench's default is 1,000)")

MAX_PAYLOAD_POOL_BYTES = Bound(
    "MAX_PAYLOAD_POOL_BYTES", 1024 * MiB, "bytes",
    ("workload.randomizedPayloadPoolSize x messageSize",),
    "the pool is held in memory by every producer process, next to the broker clients' own buffers",
    human="1 GiB")

MAX_PRODUCER_RATE = Bound(
    "MAX_PRODUCER_RATE", 10_000_000, "msg/s", ("workload.producerRate", "workload.sweepRatesMsgS[]"),
    "the total over all producers; published single-cluster benchmarks of Kafka, Pulsar and RabbitMQ reach "
    "a few million msg/s, and 0 already means 'as fast as possible'")

MAX_SWEEP_STEPS = Bound(
    "MAX_SWEEP_STEPS", 100, "rates", ("workload.sweepRatesMsgS",),
    "each rate of a throughput sweep is one measured step of its own: 100 steps of a minute already take "
    "close to two hours")

MAX_SWEEP_PUBLISH_P99_MS = Bound(
    "MAX_SWEEP_PUBLISH_P99_MS", 600_000, "ms", ("workload.sweepMaxPublishP99Ms",),
    "the publish latency p99 a stable sweep step may reach: a broker that takes ten minutes to acknowledge "
    "sustains no rate, and a larger bound is none", human="10 min")

MAX_BACKLOG_GB = Bound(
    "MAX_BACKLOG_GB", 10_000, "GB", ("workload.consumerBacklogSizeGB",),
    "the backlog is written to the brokers' disks before it is drained: 10 TB is more than a benchmark "
    "cluster's disks hold")

MAX_BACKLOG_DRAIN_RATIO = Bound(
    "MAX_BACKLOG_DRAIN_RATIO", 1, "", ("workload.backlogDrainRatio",),
    "the share of the backlog read before the drain ends: more than all of it never happens")

MAX_DURATION_MINUTES = Bound(
    "MAX_DURATION_MINUTES", 1_440, "minutes", ("workload.testDurationMinutes", "workload.warmupDurationMinutes"),
    "one phase of one workload; longer than a day and a daily suite's run overlaps the next one (OMB's shipped "
    "workloads run 15 minutes)", human="24 h")

# -- drivers ------------------------------------------------------------------------

MAX_REPLICAS = Bound(
    "MAX_REPLICAS", 16, "copies",
    ("driver.replicationFactor", "driver.client.persistence.ensembleSize",
     "driver.client.persistence.writeQuorum", "driver.client.persistence.ackQuorum"),
    "one copy per broker (Kafka) or bookie (Pulsar), and no broker accepts more copies than it has nodes: "
    "benchmark clusters have 3 to a dozen")

MAX_CLIENT_THREADS = Bound(
    "MAX_CLIENT_THREADS", 1_024, "", ("driver.client.ioThreads", "driver.client.connectionsPerBroker"),
    "threads and connections of one Pulsar client (its defaults are 1); every client of the workload has its "
    "own, so more multiplies into more threads and sockets than a worker host runs")

MAX_BATCH_DELAY_MS = Bound(
    "MAX_BATCH_DELAY_MS", 60_000, "ms", ("driver.producer.batchingMaxPublishDelayMs",),
    "a message waits up to this long in a batch: beyond a minute every latency measured is this delay "
    "(Pulsar's default is 1 ms)", human="1 min")

MAX_QUEUED_MESSAGES = Bound(
    "MAX_QUEUED_MESSAGES", 1_000_000, "messages",
    ("driver.producer.pendingQueueSize", "driver.consumer.receiverQueueSize"),
    "messages one Pulsar producer or consumer buffers in memory (defaults 1,000 or fewer): a million of "
    "1 KiB is already 1 GB per client")

# -- suites -------------------------------------------------------------------------

MAX_INTERVAL_SECONDS = Bound(
    "MAX_INTERVAL_SECONDS", 3_600, "s", ("suite.intervalSeconds",),
    "the workers' reporting interval: one sample an hour leaves most tests without a single interval",
    human="1 h")

MAX_TRIALS = Bound(
    "MAX_TRIALS", 20, "", ("suite.trials",),
    "measured phases per workload, back to back, each a full test duration (the same value as the run "
    "param's bound, spec/params.py's MAX_TRIALS)")

MAX_INSTANCES_PER_ROLE = Bound(
    "MAX_INSTANCES_PER_ROLE", 30, "instances", ("params.instance_counts", "aws.counts"),
    "EC2 instances of one role in one run: a typo (300 for 3) is refused before anything is billed; no seed "
    "workload needs more than a few dozen")

#: every bound, in the order docs/specs.md lists them
ALL: tuple[Bound, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Bound))


# -- checks -----------------------------------------------------------------------------

def at_most(bound: Bound) -> AfterValidator:
    """A pydantic validator refusing a value above ``bound`` with its reason::

        topics: Annotated[int, at_most(MAX_TOPICS)] = Field(ge=1)
    """
    def check(value: Any) -> Any:
        if value > bound.value:
            raise ValueError(bound.refusal(value))
        return value

    return AfterValidator(check)


def _name(bound: Bound):
    def check(value: str) -> str:
        if not value.strip():
            raise ValueError(f"must not be blank (got {value!r})")
        if len(value) > bound.value:
            raise ValueError(f"must be <= {bound.text()} (got {len(value):,} characters): {bound.reason}")
        return value

    return AfterValidator(check)


def _text(bound: Bound):
    def check(value: str) -> str:
        if len(value) > bound.value:
            raise ValueError(f"must be <= {bound.text()} (got {len(value):,} characters): {bound.reason}")
        return value

    return AfterValidator(check)


#: a name: not blank, at most MAX_NAME_LENGTH characters
Name = Annotated[str, _name(MAX_NAME_LENGTH)]
#: a tag: not blank, at most MAX_TAG_LENGTH characters
Tag = Annotated[str, _name(MAX_TAG_LENGTH)]
#: free text: at most MAX_DESCRIPTION_LENGTH characters
Description = Annotated[str, _text(MAX_DESCRIPTION_LENGTH)]


def non_finite(data: Any, where: str = "") -> list[tuple[str, float]]:
    """Every (field, value) in ``data`` (nested mappings and lists) whose value is a non-finite float."""
    if isinstance(data, float):
        return [] if math.isfinite(data) else [(where, data)]
    if isinstance(data, dict):
        items: Any = ((f"{where}.{k}" if where else str(k), v) for k, v in data.items())
    elif isinstance(data, list):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(data))
    else:
        return []
    return [found for field, value in items for found in non_finite(value, field)]


def markdown_table() -> str:
    """Every bound as a Markdown table (docs/specs.md, section "Bounds", lists exactly this)."""
    rows = ["| bound | fields | at most | why |", "|---|---|---|---|"]
    for b in ALL:
        fields = ", ".join(f"`{f}`" for f in b.fields)
        rows.append(f"| `{b.name}` | {fields} | {b.text()} | {b.reason} |")
    return "\n".join(rows)
