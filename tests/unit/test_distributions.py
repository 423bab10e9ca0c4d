"""Broker versions from Maven Central: what is asked of Maven and what is refused before it (no network here;
tests/integration/test_apache_brokers.py resolves for real)."""

from __future__ import annotations

import json

import pytest

from brokerbench.environments.base import EnvironmentFailure
from brokerbench.environments.local import LocalSettingsError, check_brokers
from brokerbench.environments.machine import distributions as d
from brokerbench.environments.machine import implementation_for
from brokerbench.environments.settings import LocalSettings


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BROKERBENCH_BROKER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("version", ["4.1.1; rm -rf /", "../4.1.1", "", "latest", "4.1.1</version>"])
def test_a_version_that_is_no_version_never_reaches_maven(version, monkeypatch):
    monkeypatch.setattr(d.shutil, "which", lambda _: pytest.fail("Maven was called"))
    with pytest.raises(d.DistributionError) as e:
        d.resolve("kafka", version or " ")
    assert "not a version number" in str(e.value) and "org.apache.kafka:kafka_2.13" in str(e.value)


def test_logging_jars_as_apache_distributions_add_them():
    # Kafka 3.x logs through the log4j 1 API: reload4j and its slf4j binding, at the closure's slf4j version
    assert d._logging_deps("kafka", "3.9.1", ["slf4j-api-1.7.36.jar", "kafka_2.13-3.9.1.jar"]) == [
        ("ch.qos.reload4j", "reload4j", d.RELOAD4J), ("org.slf4j", "slf4j-reload4j", "1.7.36")]
    # Kafka 4.x: log4j 2 (core in the closure) and the binding for slf4j 1.x, at the closure's log4j version
    assert d._logging_deps("kafka", "4.1.1", ["slf4j-api-1.7.36.jar", "log4j-core-2.24.3.jar",
                                              "log4j-api-2.24.3.jar"]) == [
        ("org.apache.logging.log4j", a, "2.24.3") for a in ("log4j-api", "log4j-core", "log4j-slf4j-impl")]
    # Pulsar: a closure with mixed log4j versions is pinned to the newest of them, slf4j 2 binding
    assert d._logging_deps("pulsar", "4.0.7", ["slf4j-api-2.0.13.jar", "log4j-api-2.18.0.jar",
                                               "log4j-core-2.18.0.jar", "log4j-slf4j2-impl-2.23.1.jar"]) == [
        ("org.apache.logging.log4j", a, "2.23.1") for a in ("log4j-api", "log4j-core", "log4j-slf4j2-impl")]


def test_the_pom_pins_the_logging_jars():
    pom = d._pom("pulsar", "4.0.7", [("org.apache.logging.log4j", "log4j-core", "2.23.1")])
    assert "<artifactId>pulsar-broker</artifactId><version>4.0.7</version>" in pom
    managed = pom.split("<dependencyManagement>")[1].split("</dependencyManagement>")[0]
    assert "<artifactId>log4j-core</artifactId><version>2.23.1</version>" in managed


def test_a_tool_on_the_libraries_of_another_version():
    pom = d._pom("pulsar-testclient", "4.0.6", [], libraries="4.0.7")
    assert "<artifactId>pulsar-testclient</artifactId><version>4.0.6</version>" in pom
    managed = pom.split("<dependencyManagement>")[1].split("</dependencyManagement>")[0]
    # the project's BOM first (its modules at 4.0.7 win), then the build pom of the same version
    assert managed.index("<artifactId>pulsar-bom</artifactId><version>4.0.7</version>") < managed.index(
        "<artifactId>pulsar</artifactId><version>4.0.7</version>")
    assert d._entry("4.0.6", "4.0.7") == "4.0.6+libraries-4.0.7" and d._entry("4.0.7", None) == "4.0.7"
    with pytest.raises(d.DistributionError, match="no BOM pins"):
        d.resolve("kafka-tools", "4.1.1", libraries="4.1.0")
    with pytest.raises(d.DistributionError, match="not a version number"):
        d.resolve("pulsar-testclient", "4.0.6", libraries="4.0.7; x")


def test_mavens_reason_is_the_line_that_says_why():
    out = ("[ERROR] Failed to execute goal on project kafka: Could not resolve dependencies for project "
           "brokerbench.resolve:kafka:pom:1: Could not find artifact org.apache.kafka:kafka_2.13:jar:9.9.9 in "
           "central (https://repo.maven.apache.org/maven2) -> [Help 1]\n[ERROR] \n[ERROR] To see the full stack")
    assert d._mvn_reason(out) == ("Could not find artifact org.apache.kafka:kafka_2.13:jar:9.9.9 in central "
                                  "(https://repo.maven.apache.org/maven2)")
    remembered = ("[ERROR] Failed to execute goal on project kafka: Could not resolve dependencies for project x:kafka:"
                  "pom:1: Failure to find org.apache.kafka:kafka_2.13:jar:9.9.9 in https://repo.maven.apache.org/"
                  "maven2 was cached in the local repository, resolution is not reattempted until ...")
    assert d._mvn_reason(remembered) == ("Could not find artifact org.apache.kafka:kafka_2.13:jar:9.9.9 in "
                                         "https://repo.maven.apache.org/maven2")


def test_a_cached_version_is_used_without_maven_and_an_incomplete_one_is_not(cache, monkeypatch):
    lib = cache / "kafka" / "4.1.1" / "lib"
    lib.mkdir(parents=True)
    (lib / "kafka_2.13-4.1.1.jar").write_bytes(b"jar")
    manifest = {"broker": "kafka", "version": "4.1.1", "logging_api": "log4j2", "resolver_revision": d.RESOLVER_REVISION,
                "jars": [{"name": "kafka_2.13-4.1.1.jar", "bytes": 3, "sha256": "x"}]}
    (lib.parent / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(d.shutil, "which", lambda _: None)  # no Maven: only the cache can answer
    dist = d.resolve("kafka", "4.1.1")
    assert (dist.version, dist.lib, dist.source) == ("4.1.1", lib, "maven")
    assert dist.classpath() == f"{lib}/*" and dist.provenance()["jars"][0]["sha256"] == "x"
    (lib / "kafka_2.13-4.1.1.jar").write_bytes(b"truncated jar")  # size differs: not trusted
    assert d.cached("kafka", "4.1.1") is None
    with pytest.raises(d.DistributionError, match="Maven \\(mvn\\) is not installed"):
        d.resolve("kafka", "4.1.1")


def test_the_real_brokers_are_the_default_and_stand_ins_are_chosen_by_name():
    assert implementation_for("kafka", LocalSettings()) == "apache-kafka"
    assert implementation_for("pulsar", LocalSettings()) == "apache-pulsar"
    assert implementation_for("kafka", LocalSettings(broker_implementations={"kafka": "tansu"})) == "tansu"
    with pytest.raises(EnvironmentFailure, match="'redpanda' is not one of apache-kafka, tansu"):
        implementation_for("kafka", LocalSettings(broker_implementations={"kafka": "redpanda"}))


def test_check_brokers_names_the_setting(monkeypatch):
    stand_ins = check_brokers({"broker_implementations": {"kafka": "tansu", "pulsar": "pulsar-lite"},
                               "broker_versions": {"kafka": "3.9.1"}}, ["kafka", "pulsar"])
    assert stand_ins["kafka"]["implementation"] == "tansu" and "(asked: 3.9.1)" in stand_ins["kafka"]["note"]
    with pytest.raises(LocalSettingsError) as e:
        check_brokers({"broker_versions": {"kafka": "4.x"}}, ["kafka"])
    assert e.value.setting == "broker_versions.kafka" and "'4.x'" in str(e.value)
    with pytest.raises(LocalSettingsError) as e:
        check_brokers({"broker_implementations": {"pulsar": "tansu"}}, ["pulsar"])
    assert e.value.setting == "broker_implementations.pulsar"
    monkeypatch.setattr("brokerbench.environments.local.environment.installed_rabbitmq_version", lambda: "3.10.8")
    assert check_brokers({}, ["rabbitmq"])["rabbitmq"]["version"] == "3.10.8"
    with pytest.raises(LocalSettingsError, match="installed Debian package, rabbitmq-server 3.10.8") as e:
        check_brokers({"broker_versions": {"rabbitmq": "3.13.7"}}, ["rabbitmq"])
    assert e.value.setting == "broker_versions.rabbitmq"


def test_from_home_reads_an_unpacked_tarball(tmp_path):
    libs = tmp_path / "kafka_2.13-3.9.1" / "libs"
    libs.mkdir(parents=True)
    for name in ("kafka_2.13-3.9.1.jar", "reload4j-1.2.25.jar", "kafka-clients-3.9.1.jar"):
        (libs / name).write_bytes(b"x")
    dist = d.from_home("kafka", libs.parent)
    assert (dist.version, dist.logging_api, dist.source) == ("3.9.1", "log4j1", "home")
    with pytest.raises(EnvironmentFailure, match="is not an unpacked Apache Pulsar distribution"):
        d.from_home("pulsar", tmp_path)


def test_stopping_or_tearing_down_never_resolves_a_version(tmp_path):
    """A teardown (also on an aws host, through the agent) must not download a broker it never started, nor
    fail on a version that cannot be resolved: only deploy resolves (this file's conftest makes resolution
    fail in unit tests)."""
    from brokerbench.environments.local import LocalEnvironment

    env = LocalEnvironment("t/x", {"state_dir": str(tmp_path / "state"), "broker_versions": {"pulsar": "9.9.9"}})
    env.provision()
    for broker in ("kafka", "pulsar", "rabbitmq"):
        env.undeploy(broker)
    record = env.teardown()
    assert record["errors"] == [] and record["remaining"] == []
