"""`brokerbench list`: each suite's description, brokers (driver, client library, default version), variants and
workloads (rate and size as the suite runs them), every workload, driver and variant, and the broker versions
already resolved in the broker cache - written there by the resolver itself (Maven's part replaced by jars of
our own)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from brokerbench import cli, inventory
from brokerbench.environments.machine import distributions
from brokerbench.environments.settings import LocalSettings
from brokerbench.spec import load_workload, spec_root


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A broker cache with Apache Kafka 3.9.1 and 4.1.1 and PerfTest 2.22.1 resolved by distributions.resolve
    (``_copy_dependencies``: a jar per version instead of Maven), and an interrupted resolution of Kafka 3.8.0."""
    root = tmp_path / "cache"
    monkeypatch.setenv("BROKERBENCH_BROKER_CACHE", str(root))

    def jars(work: Path, pom: str, out: Path, broker: str, version: str) -> list[str]:
        out.mkdir(parents=True, exist_ok=True)
        name = f"{distributions.TOOL_ARTIFACTS.get(broker, distributions.ARTIFACTS.get(broker))[1]}-{version}.jar"
        (out / name).write_bytes(b"PK" + version.encode())
        return [name]

    monkeypatch.setattr(distributions, "_copy_dependencies", jars)
    monkeypatch.setattr(distributions.shutil, "which", lambda name: f"/usr/bin/{name}")
    for broker, version in (("kafka", "4.1.1"), ("kafka", "3.9.1"), ("perf-test", "2.22.1")):
        distributions.resolve(broker, version)
    (root / "kafka" / "3.8.0" / "lib").mkdir(parents=True)  # no manifest: not in the cache
    monkeypatch.setattr(inventory, "installed_rabbitmq", lambda: "3.10.8-1.1+deb12u1")
    return root


def _block(out: str, start: str) -> str:
    """The lines of ``out`` from the one starting with ``start`` to the next blank line after a table."""
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(start))
    end = next((i for i in range(first + 1, len(lines)) if lines[i] and not lines[i].startswith(" ")), len(lines))
    return "\n".join(lines[first:end])


def test_list_shows_each_suite_the_workloads_drivers_variants_and_the_cached_versions(cache, capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    smoke = _block(out, "smoke  ")
    assert smoke.startswith("smoke  (DAG brokerbench_smoke; environment local; not scheduled; 1 trial; "
                            "intervals of 5 s)")
    assert "Smoke test: 1 topic, 1 partition, 100-byte messages at 1,000 msg/s" in smoke  # the description
    assert "  variants: fsync-off, fsync-on" in smoke
    kafka = LocalSettings().broker_versions["kafka"]
    where = "in the cache" if kafka in ("3.9.1", "4.1.1") else "from Maven Central on first use"
    rows = {line.split()[0]: line for line in smoke.splitlines() if line.startswith("  ")}
    assert re.search(r"broker\s+driver\s+client_library\s+default_version", smoke)
    assert re.fullmatch(rf"  kafka\s+kafka-latency\s+kafka-python\s+Apache Kafka {kafka} \({where}\)", rows["kafka"])
    pulsar = LocalSettings().broker_versions["pulsar"]  # none of Pulsar's versions is in this cache
    assert rows["pulsar"].endswith(f"Apache Pulsar {pulsar} (from Maven Central on first use)")
    assert rows["rabbitmq"].endswith("RabbitMQ 3.10.8-1.1+deb12u1 (Debian package rabbitmq-server)")
    # the workload as the suite runs it (its overrides applied), units in the column names
    assert re.search(r"workload\s+kind\s+rate_msg_s\s+message_size_bytes\s+topics_x_partitions\s+clients_per_topic\s+"
                     r"duration_min\s+warmup_min", smoke)
    assert re.search(r"smoke-1-topic-1-partition-100b\s+latency\s+1,000\s+100\s+1 x 1\s+1p 1c\s+0\.5\s+0\.1", smoke)
    nightly = _block(out, "nightly-latency  ")
    assert "schedule @daily" in nightly and re.search(r"kafka\s+kafka-latency\s+confluent-kafka\s", nightly)
    assert re.search(r"pulsar\s+pulsar-default\s+pulsar-client-java\s", nightly)  # the JVM engine's client
    assert re.search(r"rabbitmq\s+rabbitmq-default\s+amqp-client-java\s", nightly)
    assert re.search(r"latency-1-topic-1-partition-100b\s+latency\s+5,000\s+100\s", nightly)  # the suite's rate
    aws = _block(out, "aws-seed-latency  ")
    assert "environment aws" in aws and "Apache Kafka 3.9.1 (in the cache)" in aws  # the suite's own version

    workloads = _block(out, "workloads (")
    assert re.search(r"latency-1-topic-1-partition-100b\s+latency\s+50,000\s+100\s+1 x 1\s+1p 1c\s+15\s+1",
                     workloads)  # the file's rate
    assert re.search(r"throughput-1-topic-100-partitions-1kb-max\s+throughput-sweep\s+max\s+1,024\s+1 x 100\s+4p 4c",
                     workloads)
    drivers = _block(out, "drivers (")
    assert re.search(r"kafka-replicated\s+kafka\s+kafka-python \(default\)\s+3", drivers)
    assert re.search(r"pulsar-replicated\s+pulsar\s+pulsar-client \(default\)\s+ensemble 3, write 3, ack 2", drivers)
    assert re.search(r"rabbitmq-quorum\s+rabbitmq\s+pika \(default\)\s+quorum queues", drivers)
    variants = _block(out, "variants (")
    assert re.search(r"  fsync-on\s+Every message is written to disk \(fsync\) before it is acknowledged\.$", variants,
                     re.M)

    assert _block(out, "broker versions in the cache").splitlines()[:4] == [
        f"broker versions in the cache ({cache}; BROKERBENCH_BROKER_CACHE):",
        "  kafka     3.9.1, 4.1.1",  # version order; 3.8.0's resolution never finished
        "  pulsar    (none yet)",
        "  vendors' perf tools (brokerbench calibrate): perf-test 2.22.1",
    ]


def test_a_broken_suite_is_listed_with_its_error(tmp_path, monkeypatch, cache, capsys):
    spec = tmp_path / "spec"
    spec.mkdir()
    for kind in ("workloads", "drivers", "variants"):
        (spec / kind).symlink_to(spec_root() / kind)
    (spec / "suites").mkdir()
    (spec / "suites" / "broken.yaml").write_text("name: broken\nworkloads: [no-such-workload]\n"
                                                 "brokers: {kafka: kafka-latency}\nvariants: [fsync-on]\n")
    monkeypatch.setenv("BROKERBENCH_SPEC_ROOT", str(spec))
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    broken = _block(out, "broken  ")
    assert broken.startswith("broken  (error: `brokerbench validate broken` says why)")
    assert "no-such-workload" in broken


def test_a_workloads_rate_reads_as_msg_s_max_or_its_sweep():
    w = load_workload("throughput-1-topic-100-partitions-1kb-max")
    assert inventory.rate_text(w) == "max"
    assert inventory.rate_text(w.model_copy(update={"sweep_rates_msg_s": [40000.0, 1000.0, 2500.0]})) == \
        "sweep 1,000 to 40,000 (3 steps)"
    assert inventory.rate_text(load_workload("latency-1-topic-24-partitions-1kb-30k")) == "30,000"
