"""Client libraries: which library the workers use to talk to each broker.

A run's client library per broker is chosen, first given wins, by

1. the run param ``client_libraries`` (``{"kafka": "confluent-kafka"}``),
2. the suite's ``clientLibraries`` (the same mapping, in the suite file),
3. the driver file's ``clientLibrary`` (the suite's driver of that broker, or the one of ``driver_files``),
4. the broker's default, the first library :data:`CLIENT_LIBRARIES` lists for it.

:func:`choose_client_library` applies that order; the plan carries the choice in each item's driver
(``PlanItem.driver.client_library``), the pipeline puts it into every worker job (``client_library``), and the
worker records the library it ran, with its version, in every result row.
"""

from __future__ import annotations

from typing import Mapping

from .common import SUPPORTED_BROKERS

#: broker -> the client libraries a run may choose for it, its default first. The worker's driver table
#: (brokerbench.worker.drivers.DRIVERS) has one driver for each of these; a unit test keeps the two the same.
CLIENT_LIBRARIES: dict[str, tuple[str, ...]] = {
    "kafka": ("kafka-python", "confluent-kafka"),
    "pulsar": ("pulsar-client",),
    "rabbitmq": ("pika",),
}


def default_client_library(broker: str) -> str:
    return CLIENT_LIBRARIES[broker][0]


def client_library_problem(broker: str, library: object) -> str | None:
    """Why ``library`` cannot drive ``broker`` (naming the allowed ones), or None when it can."""
    if broker not in CLIENT_LIBRARIES:
        return f"unknown broker {broker!r}; supported brokers: {', '.join(SUPPORTED_BROKERS)}"
    allowed = CLIENT_LIBRARIES[broker]
    if library not in allowed:
        return f"{library!r} is not a {broker} client library; allowed: {', '.join(allowed)}"
    return None


def choose_client_library(broker: str, param: Mapping[str, str] | None, suite: Mapping[str, str] | None,
                          driver: str | None) -> str:
    """The param's library for ``broker``, else the suite's, else the driver file's, else the default.

    The values were validated where they were read (params, suite file, driver file)."""
    return (param or {}).get(broker) or (suite or {}).get(broker) or driver or default_client_library(broker)


def describe_choices() -> str:
    """``kafka: kafka-python (default), confluent-kafka; pulsar: pulsar-client; ...`` for params and docs."""
    return "; ".join(f"{b}: " + ", ".join(f"{lib} (default)" if i == 0 and len(libs) > 1 else lib
                                          for i, lib in enumerate(libs))
                     for b, libs in CLIENT_LIBRARIES.items())
