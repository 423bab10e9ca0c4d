"""The nightly suite's DAG on ``environment: external`` under `airflow dags test`: Apache Kafka and RabbitMQ that
the test starts on loopback with the local environment are the "existing" clusters, given to the DAG only as
connections (``AIRFLOW_CONN_BROKERBENCH_KAFKA`` / ``_RABBITMQ``). The run goes through every task (the lease,
deploy without deploying, the phases, Spark's aggregation, the report, teardown) and leaves each cluster's topic
and queue lists as they were.

The brokers' own metrics come as a user of each kind gives them: Kafka's from the endpoint its connection names
(``extra.metrics_endpoints``: the JMX exporter the local deploy starts, scraped by brokerbench), RabbitMQ's
from a real Prometheus server (Debian's) that scrapes its rabbitmq_prometheus endpoint, named by the RabbitMQ
connection (``extra.prometheus_conn_id``) and read over Prometheus' HTTP API after each phase. A second run,
whose Prometheus connection names a port nothing listens on, is refused at validate naming the connection."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import time

import pytest

from brokerbench.environments.machine.broker import free_port
from brokerbench.util import run_prefix
from tests.e2e.test_smoke_dag import AIRFLOW, ROOT, run_dir_of
from tests.integration.test_external_clusters import kafka_listing, rabbitmq_listing
from tests.support.prometheus import prometheus

pytestmark = pytest.mark.e2e

DAG = "brokerbench_nightly_latency"
FOREIGN = run_prefix("someone/else") + "-theirs"
PROMETHEUS_CONN = "bb_test_prometheus"


def dags_test(conf: dict, environ: dict, log) -> tuple[int, float]:
    started = time.monotonic()
    with open(log, "w") as out:
        rc = subprocess.run([AIRFLOW, "dags", "test", DAG, "-c", json.dumps(conf)], cwd=ROOT, env=environ,
                            stdout=out, stderr=subprocess.STDOUT, timeout=900).returncode
    took = time.monotonic() - started
    print(f"{DAG} on external: exit {rc} after {took:.0f} s (log {log})")
    return rc, took


@pytest.fixture(scope="module")
def nightly(tmp_path_factory):
    import pika
    from confluent_kafka.admin import AdminClient, NewTopic

    from brokerbench.environments.local import LocalEnvironment

    base = tmp_path_factory.mktemp("external-dag")
    env = LocalEnvironment("test_external_dag/cluster", {"state_dir": str(base / "cluster"), "disk_baseline_mb": 0,
                                                         "kafka_heap_mb": 384})
    env.provision()
    try:
        cluster = {"env": env, "kafka": env.deploy("kafka", {}, "fsync-off", {}),
                   "rabbitmq": env.deploy("rabbitmq", {}, "fsync-off", {})}
        # someone else's topic and queue, named like another brokerbench run's: they must stay
        admin = AdminClient({"bootstrap.servers": cluster["kafka"].bootstrap_servers})
        admin.create_topics([NewTopic(FOREIGN, 1, 1)])[FOREIGN].result()
        conn = pika.BlockingConnection(pika.URLParameters(cluster["rabbitmq"].amqp_uris[0]))
        conn.channel().queue_declare(FOREIGN, durable=True)
        conn.close()
        before = {"kafka": kafka_listing(cluster["kafka"].bootstrap_servers), "rabbitmq": rabbitmq_listing(cluster)}
        endpoints = {t.broker: t.url for t in env.metrics_targets()}
        rabbitmq_scraped = endpoints["rabbitmq"].split("//", 1)[1].split("/", 1)[0]
        results, log = base / "results", base / "dags-test.log"
        conf = {"results_root": str(results), "environment": "external", "brokers": ["kafka", "rabbitmq"],
                "variants": ["fsync-off"], "test_duration_minutes": 0.1, "warmup_duration_minutes": 0.05,
                "rate_override_msg_s": 500}
        environ = {**os.environ, "BROKERBENCH_HOME": str(base / "home"),
                   "AIRFLOW_CONN_BROKERBENCH_KAFKA": json.dumps(
                       {"conn_type": "kafka", "extra": {"bootstrap.servers": cluster["kafka"].bootstrap_servers,
                                                        "metrics_endpoints": [endpoints["kafka"]]}}),
                   "AIRFLOW_CONN_BROKERBENCH_RABBITMQ": json.dumps(
                       {"conn_type": "amqp", "extra": {"amqp_uri": cluster["rabbitmq"].amqp_uris[0],
                                                       "prometheus_conn_id": PROMETHEUS_CONN,
                                                       "prometheus_labels": {"job": "staging-rabbitmq"}}})}
        with prometheus(base / "prometheus", {"staging-rabbitmq": [rabbitmq_scraped]}) as prom:
            environ[f"AIRFLOW_CONN_{PROMETHEUS_CONN.upper()}"] = json.dumps(
                {"conn_type": "http", "host": "127.0.0.1", "port": prom["port"], "schema": "http"})
            rc, took = dags_test(conf, environ, log)
        after = {"kafka": kafka_listing(cluster["kafka"].bootstrap_servers), "rabbitmq": rabbitmq_listing(cluster)}
        # the same run, its Prometheus connection on a port nothing listens on
        dead = {**environ, f"AIRFLOW_CONN_{PROMETHEUS_CONN.upper()}": json.dumps(
            {"conn_type": "http", "host": "127.0.0.1", "port": free_port(), "schema": "http"})}
        refused_log = base / "dags-test-refused.log"
        refused_rc, refused_took = dags_test({**conf, "results_root": str(base / "results-refused")}, dead,
                                             refused_log)
        yield {"rc": rc, "log": log, "run_dir": run_dir_of(results, DAG), "before": before, "after": after,
               "took": took, "endpoints": endpoints, "refused": {"rc": refused_rc, "log": refused_log,
                                                               "took": refused_took,
                                                               "results": base / "results-refused"}}
    finally:
        env.teardown()


def test_the_nightly_dag_runs_on_external_clusters_and_leaves_them_as_they_were(nightly):
    assert nightly["rc"] == 0, nightly["log"].read_text()[-5000:]
    print("before:", nightly["before"])
    print("after: ", nightly["after"])
    assert nightly["after"] == nightly["before"]
    assert FOREIGN in nightly["after"]["kafka"]["topics"] and FOREIGN in nightly["after"]["rabbitmq"]["queues"]
    with open(nightly["run_dir"] / "summary" / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["broker"], r["variant"]) for r in rows) == [("kafka", "fsync-off"), ("rabbitmq", "fsync-off")]
    for r in rows:
        assert 400 <= float(r["publish_rate_msg_s"]) <= 600, r
    # the suite's client libraries: RabbitMQ's through the JVM engine, its password a secret reference in the URI
    assert {r["broker"]: r["client_library"] for r in rows} == {"kafka": "confluent-kafka",
                                                               "rabbitmq": "amqp-client-java"}
    for broker in ("kafka", "rabbitmq"):
        prov = json.loads((nightly["run_dir"] / "provenance" / f"{broker}__fsync-off.json").read_text())
        assert prov["implementation"] == "external" and prov["durability"]["cluster"]
    teardown = json.loads((nightly["run_dir"] / "provenance" / "teardown.json").read_text())
    assert teardown["environment"] == "external" and teardown["errors"] == []
    assert set(teardown["clusters"]) == {"kafka", "rabbitmq"}
    assert (nightly["run_dir"] / "report.html").exists()


def test_the_brokers_own_metrics_come_from_the_connections_endpoint_and_prometheus(nightly):
    assert nightly["rc"] == 0, nightly["log"].read_text()[-5000:]
    run_dir = nightly["run_dir"]
    with open(run_dir / "summary" / "summary.csv") as f:
        rows = {r["broker"]: r for r in csv.DictReader(f)}
    for broker, row in rows.items():
        print(broker, {k: v for k, v in row.items() if k.startswith(broker + "_") or k == "broker_metrics_notes"})
    rabbit, kafka = rows["rabbitmq"], rows["kafka"]
    # RabbitMQ's figures as Prometheus took them: the publishers' 500 msg/s seen by the broker, its memory
    assert 250 <= float(rabbit["rabbitmq_messages_received_per_s"]) <= 750, rabbit
    assert float(rabbit["rabbitmq_resident_memory_mb"]) > 10, rabbit
    assert float(rabbit["rabbitmq_channel_messages_unconfirmed_messages"]) >= 0, rabbit
    # Kafka's from the endpoint the connection names (the scraper): produce requests and bytes in
    assert float(kafka["kafka_produce_requests_per_s"]) > 0, kafka
    assert float(kafka["kafka_bytes_in_mb_per_s"]) > 0, kafka
    # the raw files: RabbitMQ's from Prometheus (its scrape times, its instance as the node), Kafka's scraped
    measured = run_dir / "brokermetrics"
    [prom_file] = [p for p in measured.rglob(f"prometheus-{PROMETHEUS_CONN}.jsonl") if p.parent.name == "measure"]
    lines = [json.loads(line) for line in prom_file.read_text().splitlines()]
    head = lines[0]["header"]
    scraped = nightly["endpoints"]["rabbitmq"].split("//", 1)[1].split("/", 1)[0]
    assert [t["name"] for t in head["targets"]] == [f"rabbitmq@{scraped}"], head["targets"]
    assert PROMETHEUS_CONN in head["targets"][0]["url"] and head["targets"][0]["implementation"] == "external"
    values = [line for line in lines[1:] if "values" in line]
    assert len(values) >= 5 and all(line["values"].get("rabbitmq_messages_received_per_s") is not None
                                    for line in values), lines[:3]
    [kafka_file] = [p for p in measured.rglob("localhost.jsonl") if p.parent.name == "measure"
                    and "kafka" in str(p.relative_to(measured)).lower()]
    head = json.loads(kafka_file.read_text().splitlines()[0])["header"]
    assert [t["url"] for t in head["targets"]] == [nightly["endpoints"]["kafka"]]


def test_an_unreachable_prometheus_is_refused_at_validate_naming_the_connection(nightly):
    refused = nightly["refused"]
    text = refused["log"].read_text()
    assert refused["rc"] != 0, text[-3000:]
    assert f"connection '{PROMETHEUS_CONN}': the Prometheus at http://127.0.0.1:" in text, text[-3000:]
    assert "cannot be reached" in text and "named by connection 'brokerbench_rabbitmq'" in text
    # refused before anything ran: no plan, no phase, no worker
    runs = list((refused["results"] / "runs" / DAG).glob("*"))
    assert not any((r / "plan.json").exists() for r in runs) and not any((r / "raw").exists() for r in runs)
