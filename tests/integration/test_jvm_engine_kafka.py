"""The JVM engine's Kafka driver (kafka-clients-java) against the Python worker's fast Kafka path (confluent-kafka):
one short workload on one Apache Kafka (KRaft, small heap, module-scoped) aggregates to rows with the same columns
and publish rates within 1 % (tests/integration/test_jvm_engine.py's check, on Kafka)."""

from __future__ import annotations

import pytest

from brokerbench.worker import jvm
from tests.integration.test_jvm_engine import same_rows

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    from brokerbench.environments.local import LocalEnvironment

    jvm.ensure_built(progress=print)
    state = tmp_path_factory.mktemp("jvm-engine-kafka")
    env = LocalEnvironment("test_dag/manual__jvm_engine_kafka", {"state_dir": str(state / "state"),
                                                                "disk_baseline_mb": 8, "kafka_heap_mb": 512})
    env.provision()
    try:
        yield env.deploy("kafka", {}, "fsync-off", {}).to_dict(), state
    finally:
        env.teardown()


def test_confluent_kafka_and_the_jvm_engine_aggregate_to_the_same_rows(kafka):
    ep, state = kafka
    rows = same_rows(ep, state, "confluent-kafka", "kafka-clients-java")
    # same_rows checked columns, counts, rates and merged percentiles; each side is the library asked for
    assert {lib: (r["broker"], r["client_library"]) for lib, r in rows.items()} == {
        "confluent-kafka": ("kafka", "confluent-kafka"), "kafka-clients-java": ("kafka", "kafka-clients-java")}
