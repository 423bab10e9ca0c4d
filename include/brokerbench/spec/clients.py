"""Client libraries: which library the workers use to talk to each broker, and how fast each was measured to go.

A run's client library per broker is chosen, first given wins, by

1. the run param ``client_libraries`` (``{"kafka": "confluent-kafka"}``),
2. the suite's ``clientLibraries`` (the same mapping, in the suite file),
3. the driver file's ``clientLibrary`` (the suite's driver of that broker, or the one of ``driver_files``),
4. the broker's default, the first library :data:`CLIENT_LIBRARIES` lists for it.

:func:`choose_client_library` applies that order; the plan carries the choice in each item's driver
(``PlanItem.driver.client_library``), the pipeline puts it into every worker job (``client_library``), and the
worker records the library it ran, with its version, in every result row.

:data:`CLIENT_CEILINGS` is the one table of the rates per worker process each library was measured to reach
(docs/benchmarks-harness.md, sections 1 and 2); the ``validate`` task and ``brokerbench validate`` warn when a
workload asks one process for more (:func:`ceiling_warning`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from .common import SUPPORTED_BROKERS

#: broker -> the client libraries a run may choose for it, its default first. The worker's driver table
#: (brokerbench.worker.drivers.DRIVERS) has one driver for each of these; a unit test keeps the two the same.
CLIENT_LIBRARIES: dict[str, tuple[str, ...]] = {
    "kafka": ("kafka-python", "confluent-kafka", "kafka-clients-java"),
    "pulsar": ("pulsar-client", "pulsar-client-java"),
    "rabbitmq": ("pika", "amqp-client-java"),
}
#: the JVM engine (brokerbench.worker.jvm, docs/worker.md "The JVM engine"): its library per broker; params,
#: suites and driver files may name it ``java`` (``--client pulsar=java``)
JAVA_ALIAS = "java"
JVM_LIBRARIES: dict[str, str] = {"pulsar": "pulsar-client-java", "kafka": "kafka-clients-java",
                                 "rabbitmq": "amqp-client-java"}


#: workload kinds the JVM engine does not run (docs/worker.md "The JVM engine"): refused when the plan is made
JVM_KINDS_NOT_RUN = ("backlog", "mixed")


def engine_kind_problem(library: str, kind: str | None, backlog_gb: float) -> str | None:
    """Why the JVM engine (``library``) cannot run a workload of ``kind`` (None: derived, a backlog when
    ``backlog_gb`` > 0), or None."""
    if library not in JVM_LIBRARIES.values():
        return None
    kind = kind or ("backlog" if backlog_gb > 0 else None)
    if kind in JVM_KINDS_NOT_RUN:
        return (f"the JVM engine ({library}) does not run the {kind!r} kind (it runs latency, producer-only, "
                f"consumer-only and throughput-sweep); choose a Python client library for this broker")
    return None


def canonical_library(broker: str, library: object) -> object:
    """``library`` with the alias ``java`` replaced by the broker's JVM engine library (when it has one)."""
    return JVM_LIBRARIES.get(broker, library) if library == JAVA_ALIAS else library


def default_client_library(broker: str) -> str:
    return CLIENT_LIBRARIES[broker][0]


def client_library_problem(broker: str, library: object) -> str | None:
    """Why ``library`` cannot drive ``broker`` (naming the allowed ones), or None when it can."""
    if broker not in CLIENT_LIBRARIES:
        return f"unknown broker {broker!r}; supported brokers: {', '.join(SUPPORTED_BROKERS)}"
    allowed = CLIENT_LIBRARIES[broker]
    if canonical_library(broker, library) not in allowed:
        java = f" ({JAVA_ALIAS!r} for {JVM_LIBRARIES[broker]})" if broker in JVM_LIBRARIES else ""
        return f"{library!r} is not a {broker} client library; allowed: {', '.join(allowed)}{java}"
    return None


def choose_client_library(broker: str, param: Mapping[str, str] | None, suite: Mapping[str, str] | None,
                          driver: str | None) -> str:
    """The param's library for ``broker``, else the suite's, else the driver file's, else the default.

    The values were validated where they were read (params, suite file, driver file)."""
    chosen = (param or {}).get(broker) or (suite or {}).get(broker) or driver or default_client_library(broker)
    return str(canonical_library(broker, chosen))


def describe_choices() -> str:
    """``kafka: kafka-python (default), confluent-kafka; pulsar: pulsar-client (default), pulsar-client-java (alias
    java); ...`` for params and docs."""
    return "; ".join(f"{b}: " + ", ".join((f"{lib} (default)" if i == 0 and len(libs) > 1 else lib)
                                          + (f" (alias {JAVA_ALIAS})" if lib == JVM_LIBRARIES.get(b) else "")
                                          for i, lib in enumerate(libs))
                     for b, libs in CLIENT_LIBRARIES.items())


# -- measured ceilings ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ceiling:
    """The rates per worker process one client library was measured to reach, msg/s.

    Both were measured on the 2-core development machine with 100-byte messages, against the local environment's
    real brokers (Apache Kafka 4.1.1 and Apache Pulsar 4.0.7 from Maven Central, RabbitMQ 3.10.8 from Debian), the
    broker on the same cores: a faster client host goes further, larger messages cost more per message.
    """

    #: docs/benchmarks-harness.md section 1, "On the real brokers" (``bench/harness_ceiling.py``): one process,
    #: producers only, unthrottled, full measurement; the lower of the two invocations printed there (the JVM
    #: engine: ``bench/crosscheck.py``'s producer-only probe on an idle machine, the same measurement)
    producer_only_msg_s: int
    #: docs/benchmarks-harness.md section 2, "On the real brokers" (``bench/seed_latency.py --seconds 20``): one
    #: process producing and consuming 1 topic / 1 partition at an offered 50,000 msg/s: the publish rate it
    #: reached (it fell behind), or 50,000 when it held the whole offered rate (``held``: no higher rate was tried)
    with_consumer_msg_s: int
    held: bool = False


#: (broker, library) -> its measured ceilings; the figures are the ones docs/benchmarks-harness.md prints
CLIENT_CEILINGS: dict[tuple[str, str], Ceiling] = {
    # section 1: 11,450 (one broker running) and 9,679 msg/s (three); section 2: fell behind at 8,320 msg/s
    ("kafka", "kafka-python"): Ceiling(producer_only_msg_s=9_679, with_consumer_msg_s=8_320),
    # section 1: 260,822 and 241,027 msg/s; section 2: held 50,000 msg/s at 55.6 % of a core
    ("kafka", "confluent-kafka"): Ceiling(producer_only_msg_s=241_027, with_consumer_msg_s=50_000, held=True),
    # section 1: 14,052 and 13,096 msg/s; section 2: fell behind at 14,950 msg/s
    ("pulsar", "pulsar-client"): Ceiling(producer_only_msg_s=13_096, with_consumer_msg_s=14_950),
    # section 1: 19,625 and 18,015 msg/s; section 2: fell behind at 12,966 msg/s
    ("rabbitmq", "pika"): Ceiling(producer_only_msg_s=18_015, with_consumer_msg_s=12_966),
    # the JVM engine (docs/worker.md): producing only, the cross-check's unthrottled one-process probe on an idle
    # machine (section 1's last paragraph, section 5's idle table: 1,157,853, 598,724 and 65,400 msg/s); with a
    # consumer, section 2's workload on a loaded host (load average 3 to 17), lower bounds of the engine's ceiling:
    # Pulsar fell behind at 17,344 msg/s with the engine's process at 22.7 % of a core (the broker the limit);
    # Kafka published and consumed 50,000 msg/s but did not hold the schedule (publish-delay p99 190.85 ms);
    # RabbitMQ fell behind at 7,130 msg/s (10,000 unconfirmed at 1.4 s each allow about 7,100 msg/s)
    ("pulsar", "pulsar-client-java"): Ceiling(producer_only_msg_s=598_724, with_consumer_msg_s=17_344),
    ("kafka", "kafka-clients-java"): Ceiling(producer_only_msg_s=1_157_853, with_consumer_msg_s=50_000),
    ("rabbitmq", "amqp-client-java"): Ceiling(producer_only_msg_s=65_400, with_consumer_msg_s=7_130),
}

#: where the ceilings were printed (warnings name it)
CEILINGS_SOURCE = "docs/benchmarks-harness.md"


def _faster(broker: str, library: str, rate: float, with_consumer: bool) -> list[str]:
    """The other libraries of ``broker`` whose ceiling is at or above ``rate``."""
    out = []
    for lib in CLIENT_LIBRARIES.get(broker, ()):
        c = CLIENT_CEILINGS.get((broker, lib))
        if lib != library and c and (c.with_consumer_msg_s if with_consumer else c.producer_only_msg_s) >= rate:
            out.append(lib)
    return out


def ceiling_warning(broker: str, library: str, rate_per_process: float, with_consumer: bool,
                    what: str) -> str | None:
    """A one-line warning when ``rate_per_process`` (msg/s one worker process produces) is above the measured
    ceiling of ``library``, else None. ``what`` names the workload and driver in the message."""
    c = CLIENT_CEILINGS.get((broker, library))
    if c is None or rate_per_process <= 0:
        return None
    if with_consumer:
        ceiling, section = c.with_consumer_msg_s, 2
        how = ("the highest rate it was measured to hold" if c.held else "the rate it was measured to reach") + \
            " with a consumer in the same process"
    else:
        ceiling, section, how = c.producer_only_msg_s, 1, "the rate it was measured to reach producing only"
    if rate_per_process <= ceiling:
        return None
    faster = _faster(broker, library, rate_per_process, with_consumer)
    advice = (f"choose {' or '.join(faster)} (param client_libraries {{\"{broker}\": \"{faster[0]}\"}}) or "
              if faster else "") + "split the rate over more worker processes (environment setting worker_processes)"
    return (f"{what}: {rate_per_process:,.0f} msg/s per worker process is above {library}'s measured ceiling of "
            f"{ceiling:,} msg/s ({how}; {CEILINGS_SOURCE}, section {section}): the client may fall behind the "
            f"rate and measure itself rather than the broker; {advice}")
