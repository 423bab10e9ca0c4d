"""The JVM engine's RabbitMQ driver (amqp-client-java) on one RabbitMQ node (module-scoped): against pika, one
short workload aggregates to rows with the same columns and publish rates within 1 %
(tests/integration/test_jvm_engine.py's check, on RabbitMQ); an AMQP URI's secret reference is read from the
engine's environment."""

from __future__ import annotations

import pytest

from brokerbench.worker import jvm
from brokerbench.worker.job import WorkerError
from brokerbench.worker.runner import prepare_job, run_job
from tests.integration.test_jvm_engine import RATE, same_rows
from tests.integration.test_worker_measurement import make_job

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory):
    from brokerbench.environments.local import LocalEnvironment

    jvm.ensure_built(progress=print)
    state = tmp_path_factory.mktemp("jvm-engine-rabbitmq")
    env = LocalEnvironment("test_dag/manual__jvm_engine_rabbitmq", {"state_dir": str(state / "state"),
                                                                   "disk_baseline_mb": 8})
    env.provision()
    try:
        yield env.deploy("rabbitmq", {}, "fsync-off", {}).to_dict(), state
    finally:
        env.teardown()


def test_pika_and_the_jvm_engine_aggregate_to_the_same_rows(rabbitmq):
    ep, state = rabbitmq
    rows = same_rows(ep, state, "pika", "amqp-client-java")
    # same_rows checked columns, counts, rates and merged percentiles; each side is the library asked for
    assert {lib: (r["broker"], r["client_library"]) for lib, r in rows.items()} == {
        "pika": ("rabbitmq", "pika"), "amqp-client-java": ("rabbitmq", "amqp-client-java")}


def test_a_secret_reference_in_its_amqp_uri_is_read_from_its_environment(rabbitmq, monkeypatch):
    """How the external environment passes a RabbitMQ password (connections.py amqp_uri_for_workers): the engine
    expands ``${env:BROKERBENCH_SECRET_...}`` as the Python drivers do, and names a variable that is not set."""
    ep, state = rabbitmq
    user, rest = ep["amqp_uris"][0].split("://", 1)[1].split("@", 1)
    name, password = user.split(":", 1)
    var = "BROKERBENCH_SECRET_TEST_RABBITMQ_PASSWORD"
    endpoint = {**ep, "amqp_uris": [f"amqp://{name}:${{env:{var}}}@{rest}"]}

    def phase(n: int) -> dict:
        job = make_job("rabbitmq", ep, "amqp-client-java", rate=RATE, duration_s=1, interval_s=0.5)
        prepare_job(job)  # the queues, declared here with the plain URI: the engine alone reads the reference
        return run_job({**job, "endpoint": endpoint}, str(state / "secret" / f"{n}.jsonl"), progress=print)

    monkeypatch.delenv(var, raising=False)
    with pytest.raises(WorkerError, match=f"names the secret {var}, which is not in this process's environment"):
        phase(0)
    monkeypatch.setenv(var, password)
    assert phase(1)["sent"] == RATE
