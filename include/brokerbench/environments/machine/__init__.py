"""What runs on one machine: brokers as processes, and the workers of a run.

Shared by the environments: the ``local`` environment runs it on this
machine; the ``aws`` environment's agent (:mod:`brokerbench.environments.aws.agent`)
runs it on each fleet host. Nothing here knows about either environment.

One :class:`LocalBroker` subclass per broker implementation:

==========  ==========================================  ==============================================
broker      default                                     stand-in / alternative (setting)
==========  ==========================================  ==============================================
kafka       Apache Kafka, KRaft, version from Maven     tansu (``broker_implementations: {kafka: tansu}``);
            Central (``broker_versions``, default 4.1.1)  an unpacked tarball (``kafka_home``)
pulsar      Apache Pulsar standalone, version from      pulsar-lite (``{pulsar: pulsar-lite}``);
            Maven Central (default 4.0.7)                 an unpacked tarball (``pulsar_home``)
rabbitmq    Debian rabbitmq-server, 1 node              3-node cluster with ``nodes: 3``
==========  ==========================================  ==============================================

:func:`make_broker` picks the implementation (:func:`implementation_for`);
:mod:`.distributions` resolves Apache versions; :class:`.runtime.Machine`
deploys brokers, runs workers and tears everything down in a state directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..base import EnvironmentFailure
from ..processes import read_json
from ..settings import LocalSettings
from . import distributions
from .apache_kafka import ApacheKafkaBroker
from .apache_pulsar import ApachePulsarBroker
from .broker import LocalBroker
from .distributions import Distribution
from .pulsar_lite import PulsarLiteBroker
from .rabbitmq import RabbitMQBroker
from .tansu import TansuBroker

BROKERS = ("kafka", "pulsar", "rabbitmq")
#: broker -> implementations the local environment can run, the default first
IMPLEMENTATIONS = {"kafka": ("apache-kafka", "tansu"), "pulsar": ("apache-pulsar", "pulsar-lite"),
                   "rabbitmq": ("rabbitmq",)}


def implementation_for(broker: str, settings: LocalSettings | None = None) -> str:
    """The implementation the setting ``broker_implementations`` asks for ``broker``, else the default
    (the real broker). Raises naming the setting when the name is not one of :data:`IMPLEMENTATIONS`."""
    if broker not in IMPLEMENTATIONS:
        raise EnvironmentFailure(f"unknown broker {broker!r}; the local environment runs {', '.join(BROKERS)}")
    chosen = (settings or LocalSettings()).broker_implementations.get(broker) or IMPLEMENTATIONS[broker][0]
    if chosen not in IMPLEMENTATIONS[broker]:
        raise EnvironmentFailure(f"broker_implementations.{broker}: {chosen!r} is not one of "
                                f"{', '.join(IMPLEMENTATIONS[broker])}")
    return chosen


def distribution_for(broker: str, settings: LocalSettings | None = None) -> Distribution:
    """The Apache distribution the settings ask for: an unpacked tarball (``<broker>_home`` /
    ``BROKERBENCH_<BROKER>_HOME``), else ``broker_versions[broker]`` resolved from Maven Central
    (cached; :func:`.distributions.resolve`)."""
    settings = settings or LocalSettings()
    home = {"kafka": settings.kafka_home, "pulsar": settings.pulsar_home}.get(broker) or \
        os.environ.get(f"BROKERBENCH_{broker.upper()}_HOME")
    if home:
        return distributions.from_home(broker, home)
    return distributions.resolve(broker, settings.broker_versions.get(broker))


def _running_distribution(broker: str, record: dict[str, Any]) -> Distribution:
    d = record.get("distribution") or {}
    return Distribution(broker, str(d.get("version") or record.get("version") or "unknown"), Path(d.get("lib", ".")),
                        str(d.get("source", "maven")), str(d.get("logging_api", "log4j2")), d)


def make_broker(broker: str, state_dir: str | os.PathLike[str], settings: LocalSettings | None = None, *,
                for_start: bool = False) -> LocalBroker:
    """The LocalBroker for ``broker``.

    Without ``for_start`` (check, stop): the implementation the state dir
    recorded, so a later task (other settings, another environment variable)
    still finds, checks and stops it, and nothing is resolved. ``for_start``:
    the implementation and version the settings ask for, resolved
    (:meth:`LocalBroker.start` restarts a running broker that differs).
    """
    settings = settings or LocalSettings()
    record = read_json(Path(state_dir) / broker / "broker.json", {}) or {}
    if for_start:
        impl = implementation_for(broker, settings)
        dist = distribution_for(broker, settings) if impl.startswith("apache-") else None
    else:
        # check / stop: what the state dir recorded, never a resolution (a teardown must not download a
        # broker it never started, and must work whatever the settings say now)
        if record.get("implementation") in IMPLEMENTATIONS.get(broker, ()):
            impl = record["implementation"]
        else:
            impl = IMPLEMENTATIONS[broker][0] if broker in IMPLEMENTATIONS else ""
        dist = _running_distribution(broker, record) if impl.startswith("apache-") else None
    if impl == "apache-kafka":
        return ApacheKafkaBroker(state_dir, settings, dist)
    if impl == "tansu":
        return TansuBroker(state_dir, settings)
    if impl == "apache-pulsar":
        return ApachePulsarBroker(state_dir, settings, dist)
    if impl == "pulsar-lite":
        return PulsarLiteBroker(state_dir, settings)
    if impl == "rabbitmq":
        return RabbitMQBroker(state_dir, settings)
    raise EnvironmentFailure(f"unknown broker {broker!r}; the local environment runs {', '.join(BROKERS)}")


__all__ = ["BROKERS", "IMPLEMENTATIONS", "implementation_for", "distribution_for", "LocalBroker", "TansuBroker",
           "ApacheKafkaBroker", "PulsarLiteBroker", "ApachePulsarBroker", "RabbitMQBroker", "make_broker"]
