"""Every broker install and host setup script of the aws environment, rendered for
each version it was written against (and Kafka mode, artifact source, variant), passes
shellcheck. (tests/integration/test_aws_clusters.py runs them.)"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from brokerbench.environments.aws import brokers as aws_brokers
from brokerbench.environments.aws import environment as aws
from brokerbench.environments.aws import templates

HOSTS = [{"name": f"bb-x-broker-{i}", "address": f"10.0.1.{10 + i}"} for i in range(3)]
META = [{"name": f"bb-x-metadata-{i}", "address": f"10.0.2.{10 + i}"} for i in range(3)]
VARIANTS = {
    "kafka": [{}, {"log.flush.interval.messages": 1}],
    "pulsar": [{"journalSyncData": True}, {"journalSyncData": False, "journalWriteData": False,
                                           "journalPageCacheFlushIntervalMSec": 1000}],
    "rabbitmq": [{}, {"ha_mode": 2}],
}


def cases():
    for broker, versions in aws_brokers.KNOWN_VERSIONS.items():
        for version in versions:
            v = aws_brokers._vtuple(version)
            modes = [aws_brokers.kafka_mode(version)] if broker != "kafka" or v >= (4, 0) or v < (2, 8) \
                else ["kraft", "zookeeper"]
            for mode in modes:
                for k, settings in enumerate(VARIANTS[broker]):
                    if broker == "rabbitmq" and settings.get("ha_mode") and v >= (4,):
                        continue
                    source = ("package" if k == 0 else "tarball") if broker == "rabbitmq" else \
                        ("controller" if k == 0 else "apache-archive")
                    yield pytest.param(broker, version, mode, settings, source,
                                       id=f"{broker}-{version}-{mode}-v{k}-{source}")


def shellcheck(tmp_path, name: str, text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    res = subprocess.run(["shellcheck", "-S", "style", "-s", "bash", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, f"{name}:\n{res.stdout}{res.stderr}\n--- script ---\n{text}"


def test_shellcheck_is_installed():
    assert shutil.which("shellcheck"), "shellcheck missing: make setup installs it (include/infra/local/bootstrap.sh)"


ARTIFACT = {"path": "/opt/brokerbench/artifacts/x.tar", "sha256": "ab" * 32, "logging_api": "log4j2"}
#: Kafka's metrics endpoint on the broker hosts (aws/brokers.py _jmx_exporter)
EXPORTER = {"jar": "/opt/brokerbench/artifacts/jmx_prometheus_javaagent-1.0.1-abab.jar", "jar_sha256": "ab" * 32,
            "rules": "/opt/brokerbench/artifacts/kafka-jmx-exporter-cdcd.yaml", "rules_sha256": "cd" * 32, "port": 7071}


@pytest.mark.parametrize("broker, version, mode, settings, source", list(cases()))
def test_broker_scripts_pass_shellcheck(tmp_path, broker, version, mode, settings, source):
    scripts = aws_brokers.render_scripts(broker, version, HOSTS, META, settings, mode=mode, tuning="seed-000",
                                         run_key="brokerbench_aws_seed_latency/manual__1",
                                         source="apache-archive" if source == "apache-archive" else "controller",
                                         artifact=ARTIFACT, rabbitmq_source=source if broker == "rabbitmq"
                                         else "package", exporter=EXPORTER if broker == "kafka" else None)
    assert {s for _, s, _ in scripts} >= {f"{broker}.sh"}
    if broker == "pulsar" or mode == "zookeeper":
        assert any(s == "zookeeper.sh" for _, s, _ in scripts)
    for i, (host, name, text) in enumerate(scripts):
        assert version in text
        for key, value in settings.items():
            if key != "ha_mode" and name != "zookeeper.sh" and "metadata" not in host:
                assert key in text, (key, name)
        shellcheck(tmp_path, f"{i}-{name}", text)
        # the broker's own metrics endpoint, on the host's own address (docs/aws.md "Broker metrics")
        if name == f"{broker}.sh" and "metadata" not in host:
            address = next(h["address"] for h in HOSTS if h["name"] == host)
            want = {"kafka": f"-javaagent:{EXPORTER['jar']}={address}:7071:{EXPORTER['rules']}",
                    "pulsar": f"prometheusStatsHttpAddress={address}", "rabbitmq": f"prometheus.tcp.ip = {address}"}
            assert want[broker] in text, (host, want[broker])


def test_rabbitmq_4_refuses_classic_mirroring():
    with pytest.raises(aws.EnvironmentFailure, match="no classic queue mirroring"):
        aws_brokers.render_scripts("rabbitmq", "4.1.4", HOSTS, [], {"ha_mode": 2})


def test_kafka_modes_by_version():
    assert aws_brokers.kafka_mode("2.3.1") == "zookeeper" and aws_brokers.kafka_mode("3.9.1") == "kraft"
    assert aws_brokers.kafka_mode("3.9.1", "zookeeper") == "zookeeper"
    # by-release (a site or param undoing a suite's mode): each release its own
    assert aws_brokers.kafka_mode("3.2.3", "by-release") == "zookeeper"
    assert aws_brokers.kafka_mode("4.1.1", "by-release") == "kraft"
    with pytest.raises(aws.EnvironmentFailure):
        aws_brokers.kafka_mode("4.1.0", "zookeeper")


def test_a_kraft_cluster_id_never_starts_with_a_dash():
    """kafka-storage reads an id starting with "-" as an option (one run key in 64 hashes to one): such a key is
    hashed again, and the script formats the storage with the id it gets."""
    import base64
    import hashlib

    def plain(key: str) -> str:
        return base64.urlsafe_b64encode(hashlib.sha1(key.encode()).digest()[:16]).decode().rstrip("=")

    key = next(k for k in (f"brokerbench_aws_seed_latency/manual__{i}" for i in range(10_000)) if plain(k)[0] == "-")
    cid = aws_brokers.kafka_cluster_id(key)
    assert len(cid) == 22 and not cid.startswith("-") and cid == aws_brokers.kafka_cluster_id(key)
    other = "brokerbench_aws_seed_latency/manual__x"
    assert aws_brokers.kafka_cluster_id(other) == plain(other) or plain(other)[0] == "-"  # others keep theirs
    script = aws_brokers.render_scripts("kafka", "4.1.1", HOSTS[:1], [], {}, run_key=key, artifact=ARTIFACT)[0][2]
    assert f'format -t "{cid}" -c' in script


@pytest.mark.parametrize("template, values", [
    ("host-setup.sh.j2", {"data_dir": "/data", "remote_dir": "/opt/brokerbench", "time_server": "169.254.169.123"}),
    ("user-data.sh.j2", {"max_lifetime_minutes": 240, "run_key": "d/r"}),
    ("install-worker.sh.j2", {"remote_dir": "/opt/brokerbench", "wheel": "/opt/brokerbench/brokerbench.whl",
                              "package_id": "ab" * 32, "pip_args": ""}),
    ("install-worker.sh.j2", {"remote_dir": "/opt/brokerbench", "wheel": "/opt/brokerbench/brokerbench.whl",
                              "package_id": "ab" * 32, "pip_args": "--index-url 'https://pypi.example/simple'"}),
])
def test_host_scripts_pass_shellcheck(tmp_path, template, values):
    shellcheck(tmp_path, template.replace(".j2", ""), templates.render(template, **values))


def test_cost_estimate_of_the_seed_latency_suite():
    from brokerbench.environments.aws import fleet as aws_fleet
    from brokerbench.spec import build_plan, load_suite

    plan = build_plan(load_suite("aws-seed-latency"))
    env = aws.AwsEnvironment("d/r", plan.environment_settings, plan=plan)
    est = env.cost_estimate()
    assert est["roles"]["broker"] == {"instance_type": "i3.4xlarge", "count": 3, "usd_per_hour_each": 1.248,
                                      "usd_per_hour": 3.744}
    assert est["usd_per_hour"] == pytest.approx(3 * 1.248 + 3 * 0.023 + 2 * 0.34, abs=1e-3)
    assert est["expected_hours"] == pytest.approx(aws_fleet.expected_minutes(plan) / 60, abs=1e-3)
    assert not est.get("refused") and est["expected_usd"] < 25
