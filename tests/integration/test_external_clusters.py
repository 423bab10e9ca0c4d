"""The external environment against clusters it did not start: real Apache Kafka and RabbitMQ that this
module starts on loopback with the local environment (one broker per module, stopped at the end), then
given to brokerbench only as Airflow connections (``AIRFLOW_CONN_*``).

Each test runs the pipeline's own steps (validate, lease, provision, deploy, prepare, warm-up, measure,
teardown) on ``environment: external`` and checks, with the broker's own listing (Kafka's admin API,
``rabbitmqctl``), that the cluster holds exactly what it held before: a foreign topic / queue created before
the run - one named like another run's - is still there, the run's are gone, also when the run died after
preparing its topics.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.cluster_lists import rabbitmq_listing  # noqa: E402

from brokerbench.environments.external import ExternalEnvironment  # noqa: E402
from brokerbench.pipeline import benchmark, environment_lease, setup, teardown  # noqa: E402
from brokerbench.pipeline.context import RunContext  # noqa: E402
from brokerbench.util import run_prefix  # noqa: E402

pytestmark = pytest.mark.integration

#: a short run: 3 s warm-up, 9 s measured, 200 msg/s
SHORT = {"warmup_duration_minutes": 0.05, "test_duration_minutes": 0.15, "rate_override_msg_s": 200,
         "interval_seconds": 3}


#: the logins of the Kafka broker's SASL_PLAINTEXT listener (beside its PLAINTEXT one)
SASL_USERS = {"bench": "bench-secret", "admin": "admin-secret"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Apache Kafka and RabbitMQ on loopback, started once for the module."""
    from brokerbench.environments.local import LocalEnvironment

    env = LocalEnvironment("test_external/cluster", {"state_dir": str(tmp_path_factory.mktemp("cluster")),
                                                     "disk_baseline_mb": 0, "kafka_heap_mb": 384,
                                                     "kafka_sasl_plain_users": SASL_USERS})
    env.provision()
    try:
        yield {"env": env, "kafka": env.deploy("kafka", {}, "fsync-off", {}),
               "rabbitmq": env.deploy("rabbitmq", {}, "fsync-off", {})}
    finally:
        env.teardown()


@pytest.fixture
def connections(cluster, monkeypatch, tmp_path):
    """The loopback brokers as brokerbench's default connections, and a state root of the test's own."""
    monkeypatch.setenv("AIRFLOW_CONN_BROKERBENCH_KAFKA", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": cluster["kafka"].bootstrap_servers}}))
    monkeypatch.setenv("AIRFLOW_CONN_BROKERBENCH_RABBITMQ", json.dumps(
        {"conn_type": "amqp", "extra": {"amqp_uri": cluster["rabbitmq"].amqp_uris[0]}}))
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))
    return cluster


def kafka_listing(bootstrap: str) -> dict[str, list[str]]:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return {"topics": sorted(t for t in admin.list_topics(timeout=30).topics if not t.startswith("__")),
            "groups": sorted(g.group_id for g in admin.list_consumer_groups(request_timeout=30).result().valid)}


def run(ctx: RunContext, broker: str, variant: str) -> dict:
    """The pipeline's steps of one broker x variant, teardown whatever happens; the teardown record."""
    return run_with(ctx, broker, variant, None)


def run_with(ctx: RunContext, broker: str, variant: str, settings: dict | None) -> dict:
    """:func:`run` with environment settings added to the plan (as a suite's environmentSettings)."""
    setup.validate(ctx)
    if settings:
        plan = ctx.plan()
        plan.environment_settings.update(settings)
        ctx.plan_path.write_text(plan.to_json())
    assert environment_lease.acquire_environment(ctx) is None
    try:
        setup.provision(ctx)
        setup.setup_hosts(ctx)
        benchmark.deploy(ctx, broker, variant)
        benchmark.prepare_topics(ctx, broker, variant)
        benchmark.run_phase(ctx, broker, variant, "warmup")
        benchmark.run_phase(ctx, broker, variant, "measure")
        benchmark.undeploy(ctx, broker)
    finally:
        record = teardown.teardown(ctx)
        environment_lease.release_environment(ctx)
    return record


def measured(ctx: RunContext) -> list[dict]:
    """The interval records of the measured phase's result files."""
    files = sorted((ctx.run_dir / "raw").glob("*/*/*/measure/*.jsonl"))
    assert files, f"no measured result under {ctx.run_dir / 'raw'}"
    return [r for f in files for r in map(json.loads, f.read_text().splitlines()) if r.get("record") == "interval"]


def measured_versions(ctx: RunContext) -> set:
    """The broker versions the measured phase's worker files name (what the summary rows carry)."""
    files = sorted((ctx.run_dir / "raw").glob("*/*/*/measure/*.jsonl"))
    return {r.get("broker_version") for f in files for r in map(json.loads, f.read_text().splitlines())
            if r.get("record") == "meta"}


def assert_measured(ctx: RunContext) -> None:
    """The measured phase sent, had acknowledged and received messages, without a send error."""
    intervals = measured(ctx)
    totals = {k: sum(r[k] for r in intervals) for k in ("sent", "acked", "received", "send_errors")}
    print(f"measured: {len(intervals)} intervals, {totals}")
    assert totals["acked"] > 0 and totals["received"] > 0 and totals["send_errors"] == 0, totals


def test_kafka_run_measures_and_leaves_the_topic_list_as_it_was(connections, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = connections["kafka"].bootstrap_servers
    ctx = RunContext("brokerbench_smoke", f"manual__{uuid.uuid4().hex[:6]}", "smoke",
                     {"results_root": str(tmp_path / "results"), "environment": "external", "brokers": ["kafka"],
                      "variants": ["fsync-on"], **SHORT})
    # someone else's topics: one of their own, one that looks like a brokerbench run's (another prefix)
    foreign = ["orders", run_prefix("someone/else") + "-their-topic"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in foreign]).values():
        f.result()
    before = kafka_listing(bootstrap)
    print("kafka topics before:", before)
    record = run(ctx, "kafka", "fsync-on")
    after = kafka_listing(bootstrap)
    print("kafka topics after:", after)
    assert after == before
    assert set(foreign) <= set(after["topics"])
    prefix = run_prefix(ctx.run_key)
    deleted = record["clusters"]["kafka"]["deleted"]
    assert deleted["topics"] and all(t.startswith(prefix + "-") for t in deleted["topics"])
    assert record["errors"] == []
    # new since the run's deploy: at most the broker's own offsets topic, made by the first consumer group
    print("kafka left after teardown:", record["clusters"]["kafka"]["left"])
    assert set(record["clusters"]["kafka"]["left"].get("topics", [])) <= {"__consumer_offsets"}
    assert not record["clusters"]["kafka"]["left"].get("consumer_groups")
    assert_measured(ctx)
    provenance = json.loads((ctx.run_dir / "provenance" / "kafka__fsync-on.json").read_text())
    assert provenance["implementation"] == "external"
    # the version asked of the cluster: Kafka's API versions give the release line (4.1 for Apache Kafka 4.1.1)
    print(f"kafka: deployed {connections['kafka'].version}, external reads {provenance['version']!r} "
          f"({provenance['version_source']}); "
          f"metadata.version {provenance['durability']['cluster'].get('metadata_version')}")
    assert provenance["version"] == ".".join(connections["kafka"].version.split(".")[:2])
    assert "ApiVersions" in provenance["version_source"]
    assert measured_versions(ctx) == {provenance["version"]}
    # what the cluster says about itself: Kafka's broker configs through the admin API
    assert "log.flush.interval.messages" in provenance["durability"]["cluster"]["broker_configs"]
    assert provenance["durability"]["settings"]["topicConfig"]["flush.messages"] == "1"


def test_rabbitmq_run_measures_and_leaves_queues_and_exchanges_as_they_were(connections, tmp_path):
    import pika

    uri = connections["rabbitmq"].amqp_uris[0]
    theirs = run_prefix("someone/else") + "-their-queue"
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    conn.channel().queue_declare(theirs, durable=True)
    conn.close()
    before = rabbitmq_listing(connections)
    print("rabbitmq before:", before)
    ctx = RunContext("brokerbench_smoke", f"manual__{uuid.uuid4().hex[:6]}", "smoke",
                     {"results_root": str(tmp_path / "results"), "environment": "external",
                      "brokers": ["rabbitmq"], "variants": ["fsync-on"], **SHORT})
    record = run(ctx, "rabbitmq", "fsync-on")
    after = rabbitmq_listing(connections)
    print("rabbitmq after:", after)
    assert after == before and theirs in after["queues"]
    deleted = record["clusters"]["rabbitmq"]["deleted"]
    prefix = run_prefix(ctx.run_key)
    assert deleted["queues"] and deleted["exchanges"]
    assert all(n.startswith(prefix + "-") for n in deleted["queues"] + deleted["exchanges"])
    assert record["errors"] == []
    assert_measured(ctx)
    provenance = json.loads((ctx.run_dir / "provenance" / "rabbitmq__fsync-on.json").read_text())
    cluster_said = provenance["durability"]
    assert cluster_said["cluster"]["product"] == "RabbitMQ" and cluster_said["cluster"]["version"]
    # the version asked of the cluster (the AMQP handshake) is the row's, the one the local environment deployed
    print(f"rabbitmq: deployed {connections['rabbitmq'].version}, external reads {provenance['version']!r} "
          f"({provenance['version_source']})")
    assert provenance["version"] == connections["rabbitmq"].version == cluster_said["cluster"]["version"]
    assert "server_properties" in provenance["version_source"]
    assert measured_versions(ctx) == {provenance["version"]}


@pytest.mark.parametrize("library", ["kafka-python", "confluent-kafka"])
def test_sasl_plain_settings_reach_both_kafka_client_libraries(connections, tmp_path, monkeypatch, library):
    """The connection's SASL/PLAIN login goes to the admin client, prepare, producers and consumers of either
    library: the run measures on the SASL listener; the password is in no file of the run."""
    sasl = connections["env"]._broker("kafka").state()["sasl_address"]
    monkeypatch.setenv("AIRFLOW_CONN_SECURE_KAFKA", json.dumps(
        {"conn_type": "kafka", "login": "bench", "password": SASL_USERS["bench"],
         "extra": {"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}}))
    ctx = RunContext("brokerbench_smoke", f"manual__{uuid.uuid4().hex[:6]}", "smoke",
                     {"results_root": str(tmp_path / "results"), "environment": "external", "brokers": ["kafka"],
                      "variants": ["fsync-off"], "client_libraries": {"kafka": library}, **SHORT})
    before = kafka_listing(connections["kafka"].bootstrap_servers)
    record = run_with(ctx, "kafka", "fsync-off", {"connections": {"kafka": "secure_kafka"}})
    assert record["errors"] == [] and record["clusters"]["kafka"]["address"] == sasl
    assert_measured(ctx)
    # the version is asked through the same login (kafka-python's admin client on the SASL listener)
    assert json.loads((ctx.run_dir / "provenance" / "kafka__fsync-off.json").read_text())["version"] == \
        ".".join(connections["kafka"].version.split(".")[:2])
    assert kafka_listing(connections["kafka"].bootstrap_servers) == before
    leaked = [str(f) for f in ctx.run_dir.rglob("*") if f.is_file() and SASL_USERS["bench"] in
              f.read_text(errors="replace")]
    assert leaked == []


def test_a_wrong_sasl_password_fails_the_run_and_leaves_nothing(connections, tmp_path, monkeypatch):
    sasl = connections["env"]._broker("kafka").state()["sasl_address"]
    monkeypatch.setenv("AIRFLOW_CONN_SECURE_KAFKA", json.dumps(
        {"conn_type": "kafka", "login": "bench", "password": "not-the-password",
         "extra": {"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}}))
    ctx = RunContext("brokerbench_smoke", f"manual__{uuid.uuid4().hex[:6]}", "smoke",
                     {"results_root": str(tmp_path / "results"), "environment": "external", "brokers": ["kafka"],
                      "variants": ["fsync-off"], "client_libraries": {"kafka": "confluent-kafka"}, **SHORT})
    before = kafka_listing(connections["kafka"].bootstrap_servers)
    with pytest.raises(Exception, match="Authentication failed: Invalid username or password") as e:
        run_with(ctx, "kafka", "fsync-off", {"connections": {"kafka": "secure_kafka"}})
    print("wrong password:", str(e.value)[:300])
    assert kafka_listing(connections["kafka"].bootstrap_servers) == before


def test_a_run_that_died_after_preparing_is_cleaned_by_a_fresh_teardown(connections, tmp_path, monkeypatch):
    bootstrap = connections["kafka"].bootstrap_servers
    # a connection that states the release: it refines the release line the cluster answers
    monkeypatch.setenv("AIRFLOW_CONN_BROKERBENCH_KAFKA", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap,
                                         "broker_version": connections["kafka"].version}}))
    before = kafka_listing(bootstrap)
    ctx = RunContext("brokerbench_smoke", f"manual__{uuid.uuid4().hex[:6]}", "smoke",
                     {"results_root": str(tmp_path / "results"), "environment": "external", "brokers": ["kafka"],
                      "variants": ["fsync-off"], **SHORT})
    setup.validate(ctx)
    assert environment_lease.acquire_environment(ctx) is None
    setup.provision(ctx)
    benchmark.deploy(ctx, "kafka", "fsync-off")
    created = benchmark.prepare_topics(ctx, "kafka", "fsync-off")
    provenance = json.loads((ctx.run_dir / "provenance" / "kafka__fsync-off.json").read_text())
    print(f"kafka with the connection's broker_version: {provenance['version']!r} ({provenance['version_source']})")
    assert provenance["version"] == connections["kafka"].version
    assert "extra.broker_version" in provenance["version_source"]
    assert set(created) <= set(kafka_listing(bootstrap)["topics"])
    # the task process is gone: a new object, as Airflow's teardown task makes it, from the state directory
    record = ExternalEnvironment(ctx.run_key, {}).teardown()
    environment_lease.release_environment(ctx)
    assert record["clusters"]["kafka"]["deleted"]["topics"] == sorted(created)
    assert kafka_listing(bootstrap) == before
