"""The nightly suite's DAG on ``environment: external`` under `airflow dags test`: Apache Kafka and RabbitMQ that
the test starts on loopback with the local environment are the "existing" clusters, given to the DAG only as
connections (``AIRFLOW_CONN_BROKERBENCH_KAFKA`` / ``_RABBITMQ``). The run goes through every task (the lease,
deploy without deploying, the phases, Spark's aggregation, the report, teardown) and leaves each cluster's topic
and queue lists as they were."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import time

import pytest

from brokerbench.util import run_prefix
from tests.e2e.test_smoke_dag import AIRFLOW, ROOT, run_dir_of
from tests.integration.test_external_clusters import kafka_listing, rabbitmq_listing

pytestmark = pytest.mark.e2e

DAG = "brokerbench_nightly_latency"
FOREIGN = run_prefix("someone/else") + "-theirs"


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
        results, log = base / "results", base / "dags-test.log"
        conf = {"results_root": str(results), "environment": "external", "brokers": ["kafka", "rabbitmq"],
                "variants": ["fsync-off"], "test_duration_minutes": 0.1, "warmup_duration_minutes": 0.05,
                "rate_override_msg_s": 500}
        environ = {**os.environ, "BROKERBENCH_HOME": str(base / "home"),
                   "AIRFLOW_CONN_BROKERBENCH_KAFKA": json.dumps(
                       {"conn_type": "kafka", "extra": {"bootstrap.servers": cluster["kafka"].bootstrap_servers}}),
                   "AIRFLOW_CONN_BROKERBENCH_RABBITMQ": json.dumps(
                       {"conn_type": "amqp", "extra": {"amqp_uri": cluster["rabbitmq"].amqp_uris[0]}})}
        started = time.monotonic()
        with open(log, "w") as out:
            rc = subprocess.run([AIRFLOW, "dags", "test", DAG, "-c", json.dumps(conf)], cwd=ROOT, env=environ,
                                stdout=out, stderr=subprocess.STDOUT, timeout=900).returncode
        print(f"{DAG} on external: exit {rc} after {time.monotonic() - started:.0f} s (log {log})")
        after = {"kafka": kafka_listing(cluster["kafka"].bootstrap_servers), "rabbitmq": rabbitmq_listing(cluster)}
        yield {"rc": rc, "log": log, "run_dir": run_dir_of(results, DAG), "before": before, "after": after}
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
