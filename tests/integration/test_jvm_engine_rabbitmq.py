"""The JVM engine's RabbitMQ driver (amqp-client-java) against pika: one short workload on one RabbitMQ node
(module-scoped) aggregates to rows with the same columns and publish rates within 1 %
(tests/integration/test_jvm_engine.py's check, on RabbitMQ)."""

from __future__ import annotations

import pytest

from brokerbench.worker import jvm
from tests.integration.test_jvm_engine import same_rows

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
