"""Shared helpers of the benchmarks under bench/: start a local broker, build worker jobs."""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "include"))

from brokerbench.environments.local import LocalEnvironment  # noqa: E402
from brokerbench.worker.job import Job  # noqa: E402

#: driver (client library) -> broker
DRIVERS = {"kafka-python": "kafka", "confluent-kafka": "kafka", "pulsar-client": "pulsar", "pika": "rabbitmq",
           # the JVM engine (docs/worker.md): not in the default list
           "pulsar-client-java": "pulsar", "kafka-clients-java": "kafka", "amqp-client-java": "rabbitmq"}
#: the drivers the benchmarks run when --drivers is not given: the Python drivers
DEFAULT_DRIVERS = ("kafka-python", "confluent-kafka", "pulsar-client", "pika")

#: OMB driver settings used by the benchmarks (latency-oriented, as the seed's)
DRIVER_CONFIG = {
    "kafka": {"name": "kafka", "replicationFactor": 1, "producerConfig": "acks=1\nlinger.ms=1\nbatch.size=131072",
              "consumerConfig": "auto.offset.reset=latest"},
    "pulsar": {"name": "pulsar", "producer": {"batchingEnabled": True, "batchingMaxPublishDelayMs": 1,
                                              "blockIfQueueFull": True, "pendingQueueSize": 10000},
               "consumer": {"subscriptionType": "Failover", "receiverQueueSize": 10000}},
    "rabbitmq": {"name": "rabbitmq", "queueType": "CLASSIC", "messagePersistence": False},
}


@contextlib.contextmanager
def brokers(names, state_dir: str | None = None):
    """Start each broker in ``names`` (local environment, loopback), yield {broker: endpoint dict}."""
    state = state_dir or tempfile.mkdtemp(prefix="bb-bench-")
    env = LocalEnvironment(f"bench/{uuid.uuid4().hex[:8]}", {"state_dir": state, "disk_baseline_mb": 0})
    env.provision()
    try:
        eps = {}
        for b in sorted(set(names)):
            eps[b] = env.deploy(b, {}, "fsync-off", {}).to_dict()
        yield eps
    finally:
        env.teardown()


@contextlib.contextmanager
def driver_brokers(drivers: str, state_dir: str | None = None):
    """For a comma-separated list of client libraries, start the brokers they need and
    yield [(library, broker, endpoint dict)] in the order given."""
    libs = [lib.strip() for lib in drivers.split(",") if lib.strip()]
    unknown = [lib for lib in libs if lib not in DRIVERS]
    if unknown:
        raise SystemExit(f"--drivers: unknown {', '.join(unknown)} (known: {', '.join(DRIVERS)})")
    with brokers([DRIVERS[lib] for lib in libs], state_dir) as eps:
        yield [(lib, DRIVERS[lib], eps[DRIVERS[lib]]) for lib in libs]


def job(broker: str, endpoint: dict, library: str, *, rate: float, duration_s: float, kind: str | None = None,
        message_size: int = 100, producers: int = 1, consumers: int = 1, subscriptions: int = 1,
        interval_s: float = 10, worker: str = "bench-0", topic: str | None = None, driver: dict | None = None,
        **extra) -> Job:
    """A worker's job on one topic, built as a run builds its jobs (Job.build from the workload); ``driver``: the
    driver's settings instead of :data:`DRIVER_CONFIG`'s."""
    topic = topic or f"bench-{uuid.uuid4().hex[:10]}"
    workload = {"name": "bench", "topics": 1, "partitionsPerTopic": 1, "messageSize": message_size,
                "subscriptionsPerTopic": subscriptions, "consumerPerSubscription": consumers,
                "producersPerTopic": producers, "producerRate": rate, "testDurationMinutes": duration_s / 60}
    return Job.build(workload=workload, worker=worker, phase="measure", workload_id="bench", broker=broker,
                     variant="fsync-off", driver=driver or DRIVER_CONFIG[broker], endpoint=endpoint, topics=[topic],
                     subscriptions=[f"sub-{i}" for i in range(subscriptions)], duration_s=duration_s,
                     interval_s=interval_s, client_library=library, probe_timeout_s=60, drain_timeout_s=10,
                     **({"kind": kind} if kind else {}), **extra)


def pulsar_producer(ep: dict, topic: str):
    """A pulsar-client client and producer with the benchmarks' settings (DRIVER_CONFIG), for the bare loops."""
    import pulsar
    c = pulsar.Client(ep["service_url"], logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    cfg = DRIVER_CONFIG["pulsar"]["producer"]
    p = c.create_producer(f"persistent://public/default/{topic}", batching_enabled=True,
                          batching_max_publish_delay_ms=cfg["batchingMaxPublishDelayMs"],
                          block_if_queue_full=True, max_pending_messages=cfg["pendingQueueSize"])
    return c, p


def now_ns() -> int:
    return time.time_ns()
