"""The brokers' own metrics endpoints on the fleet's broker hosts (deploy_mode install), and the targets of each
host's scraper (:mod:`..brokermetrics`).

The install scripts turn them on, every one bound to the host's own address (docs/aws.md, "Broker metrics"):

* Apache Kafka: the Prometheus JMX exporter agent in the broker's JVM (the controller ships its jar and
  ``include/metrics/kafka-jmx-exporter.yaml``), ``http://<address>:7071/metrics``;
* Apache Pulsar: the broker's web service, ``http://<address>:8080/metrics``, and the bookie's BookKeeper
  Prometheus stats provider, ``http://<address>:8000/metrics``;
* RabbitMQ: the ``rabbitmq_prometheus`` plugin, ``http://<address>:15692/metrics``.

At deploy the controller writes each broker host's targets into ``<host dir>/brokermetrics/targets.json``
(:data:`TARGETS_FILE`), where the agent's ``brokermetrics-start`` reads them: the host knows what runs on it,
whichever Airflow worker runs the phase. Each target names its node by the host's address, so a 3-node
cluster is three targets per role.
"""

from __future__ import annotations

from ..brokermetrics import Target

#: the metrics ports, per process the scripts start
METRICS_PORTS = {"kafka": 7071, "pulsar-broker": 8080, "bookie": 8000, "rabbitmq": 15692}

#: where a broker host's targets are kept, under its host directory
TARGETS_FILE = "brokermetrics/targets.json"


def host_targets(broker: str, address: str, implementation: str, version: str,
                 kafka_exporter: bool = True) -> list[Target]:
    """The endpoints ``broker``'s node on the host at ``address`` serves (Kafka's only with its exporter)."""
    def url(process: str) -> str:
        return f"http://{address}:{METRICS_PORTS[process]}/metrics"

    if broker == "kafka":
        return [Target("kafka", "broker", address, url("kafka"), implementation, version)] if kafka_exporter else []
    if broker == "pulsar":
        return [Target("pulsar", "broker", address, url("pulsar-broker"), implementation, version),
                Target("pulsar", "bookie", address, url("bookie"), implementation, version)]
    if broker == "rabbitmq":
        return [Target("rabbitmq", "node", address, url("rabbitmq"), implementation, version)]
    return []
