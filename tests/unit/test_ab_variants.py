"""A/B of a variant in one run (param compare_with.variants): side B's items carry their own variant in side A's
deployment group, both sides are deployed afresh at every change of side (an A/A check too), a variant's
jvmOptions reach the broker's JVM over brokerbench's defaults, the refusals name their field (external, a
stand-in without a JVM, a bad flag), a broker that refuses a setting at start fails naming it, and the
aggregation files side B's rows under their own provenance."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from brokerbench.spec import Plan, SpecError, build_plan, load_suite, load_variant

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.recording_env import RecordingEnv  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SMOKE_ID = "smoke-1-topic-1-partition-100b"


def plan_of(**params) -> Plan:
    return build_plan(load_suite("smoke"), {"variants": ["fsync-off"], "trials": 4,
                                            "compare_with": {"variants": ["fsync-on"]}, **params})


def test_side_b_runs_its_own_variant_alternating_with_side_a_in_side_as_deployment():
    plan = plan_of()
    # one deployment (task group) per broker: side A's variant's; side B's variant needs no group of its own
    assert plan.deployments() == [("kafka", "fsync-off"), ("pulsar", "fsync-off"), ("rabbitmq", "fsync-off")]
    assert plan.items_for("kafka", "fsync-on") == []
    for broker in ("kafka", "pulsar", "rabbitmq"):
        items = plan.items_for(broker, "fsync-off")
        assert [(i.side, i.trial, i.variant) for i in items] == [
            ("A", 1, "fsync-off"), ("B", 1, "fsync-on"), ("B", 2, "fsync-on"), ("A", 2, "fsync-off"),
            ("A", 3, "fsync-off"), ("B", 3, "fsync-on"), ("B", 4, "fsync-on"), ("A", 4, "fsync-off")]
        assert {i.group_variant for i in items} == {"fsync-off"}
        b = items[1]
        # filed under its own variant: results, history keys and the summary's variant column
        assert b.key == f"{SMOKE_ID}.B.trial1/{b.driver.name}/fsync-on"
        assert b.variant_description == load_variant("fsync-on").description
        assert b.durability_level == load_variant("fsync-on").durability_level
        assert plan.redeploys_sides(broker)
        assert plan.side_variant(broker, "fsync-off", "B") == "fsync-on"
        assert plan.side_variant(broker, "fsync-off", "A") == "fsync-off"
    kafka = plan.items_for("kafka", "fsync-off")
    # side B's driver has side B's variant applied (Kafka's flush per message is a topic config), side A's not
    assert "flush.messages=1" in kafka[1].driver.to_omb_dict()["topicConfig"]
    assert "flush.messages" not in (kafka[0].driver.to_omb_dict().get("topicConfig") or "")
    assert kafka[1].driver_overrides["topicConfig"] == {"flush.messages": "1", "flush.ms": "0"}
    pulsar = plan.items_for("pulsar", "fsync-off")
    assert (pulsar[0].broker_settings, pulsar[1].broker_settings) == ({"journalSyncData": False},
                                                                     {"journalSyncData": True})
    rabbit = plan.items_for("rabbitmq", "fsync-off")
    assert (rabbit[0].driver.queue_type, rabbit[1].driver.queue_type) == ("CLASSIC", "QUORUM")
    assert plan.side_a_variants() == {(b, "fsync-on"): "fsync-off" for b in ("kafka", "pulsar", "rabbitmq")}
    assert plan.compare_with == {"variants": ["fsync-on"]}
    assert Plan.from_json(plan.to_json()).to_json() == plan.to_json()
    # a plan.json written before group_variant existed: each item in its own variant's group
    old = json.loads(plan_of(compare_with={"client_libraries": {"kafka": "confluent-kafka"}}).to_json())
    for item in old["items"]:
        del item["group_variant"], item["jvm_options"]
    assert {i.group_variant for i in Plan.model_validate(old).items} == {"fsync-off"}


def test_side_bs_variants_pair_in_order_with_side_as():
    plan = plan_of(variants=["fsync-off", "fsync-on"], compare_with={"variants": ["fsync-on", "fsync-off"]},
                   brokers=["kafka"])
    assert plan.deployments() == [("kafka", "fsync-off"), ("kafka", "fsync-on")]
    assert {i.variant for i in plan.items_for("kafka", "fsync-on") if i.side == "B"} == {"fsync-off"}
    assert plan.side_a_variants() == {("kafka", "fsync-on"): "fsync-off", ("kafka", "fsync-off"): "fsync-on"}
    # no two items of the run share a results directory
    assert len({i.key for i in plan.items}) == len(plan.items) == 16
    # without compare_with.variants no side redeploys unless its version is given
    assert not plan_of(compare_with={"client_libraries": {"kafka": "confluent-kafka"}}).redeploys_sides("kafka")


def test_an_aa_run_on_the_same_version_redeploys_as_the_ab_run_it_vouches_for():
    plan = plan_of(compare_with={"broker_versions": {"kafka": "4.1.1"}}, brokers=["kafka", "rabbitmq"])
    assert plan.redeploys_sides("kafka") and not plan.redeploys_sides("rabbitmq")
    plan = plan_of(compare_with={"variants": ["fsync-off"]})  # A/A of a variant
    assert all(plan.redeploys_sides(b) for b in ("kafka", "pulsar", "rabbitmq"))
    assert plan.side_a_variants() == {}


def users_variant(tmp_path: Path, name: str = "fsync-on", **kafka) -> Path:
    path = tmp_path / f"{name}.yaml"
    section = {"driver": {"topicConfig": {"flush.messages": "1", "flush.ms": "0"}}, "broker": {}, **kafka}
    path.write_text(json.dumps({"description": "fsync on, small heap", "kafka": section}))
    return path


def test_a_users_variant_file_gives_side_b_broker_settings_and_jvm_options(tmp_path):
    path = users_variant(tmp_path, broker={"num.io.threads": 4},
                         jvmOptions="-Xms64m -Xmx64m -XX:+UseSerialGC '-XX:OnOutOfMemoryError=kill -9 %p'")
    plan = plan_of(brokers=["kafka"], compare_with={"variants": [str(path)]})
    a, b = plan.items[0], plan.items[1]
    assert (a.variant, b.variant, b.group_variant) == ("fsync-off", "fsync-on", "fsync-off")
    assert b.broker_settings == {"num.io.threads": 4} and a.broker_settings == {}
    assert b.jvm_options == ["-Xms64m", "-Xmx64m", "-XX:+UseSerialGC", "-XX:OnOutOfMemoryError=kill -9 %p"]
    assert a.jvm_options == []
    assert b.variant_description == "fsync on, small heap"


@pytest.mark.parametrize("section, field, says", [
    ({"kafka": {"jvmOptions": "-Xmx64m -cp /tmp/other.jar"}}, "kafka.jvmOptions", "would change what the JVM runs"),
    ({"kafka": {"jvmOptions": "Xmx64m"}}, "kafka.jvmOptions", "is no JVM flag"),
    ({"kafka": {"jvmOptions": "-Dx='unbalanced"}}, "kafka.jvmOptions", "cannot split"),
    ({"rabbitmq": {"jvmOptions": "-Xmx64m"}}, "rabbitmq.jvmOptions", "Erlang VM"),
])
def test_bad_jvm_options_are_refused_naming_the_field(tmp_path, section, field, says):
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(section))
    with pytest.raises(SpecError) as e:
        load_variant(path)
    assert e.value.field == field and says in e.value.message, e.value


def test_jvm_options_replace_the_heap_and_the_collector_and_add_the_rest():
    from brokerbench.environments.machine.apache_kafka import JVM_PERFORMANCE
    from brokerbench.environments.machine.jvm_options import merge, named_in

    heap = ["-Xms1024m", "-Xmx1024m"]
    assert merge(heap, JVM_PERFORMANCE, []) == heap + JVM_PERFORMANCE
    got = merge(heap, JVM_PERFORMANCE, ["-Xms64m", "-Xmx64m", "-XX:+UseSerialGC"])
    # HotSpot refuses two collectors and an initial heap above the maximum: the defaults' go
    assert got == ["-server", "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
                   "-Xms64m", "-Xmx64m", "-XX:+UseSerialGC"]
    assert not [f for f in got if "G1" in f or "MaxGCPause" in f] and "-Xms1024m" not in got
    # a flag of another kind is added after the defaults (HotSpot takes a flag's last value)
    assert merge(heap, JVM_PERFORMANCE, ["-XX:MaxGCPauseMillis=5"]) == heap + JVM_PERFORMANCE + ["-XX:MaxGCPauseMillis=5"]
    assert named_in("Unrecognized VM option 'NoSuchFlag'", ["-Xmx64m", "-XX:+NoSuchFlag"]) == ["-XX:+NoSuchFlag"]
    assert named_in("Invalid maximum heap size: -Xmxabc", ["-Xmxabc", "-XX:+UseSerialGC"]) == ["-Xmxabc"]


# -- the pipeline: a fresh broker at every change of side ---------------------------------------------------------


class VariantEnv(RecordingEnv):
    """Records what each side's deploy asked (variant, broker settings, JVM options) and each job's variant."""

    def deploy_entry(self, variant, broker_settings, jvm_options):
        return ("deploy", self.side or "A", variant, json.dumps(broker_settings), tuple(jvm_options or ()))

    def endpoint(self, broker, variant, driver_overrides, jvm_options):
        from brokerbench.environments.base import BrokerEndpoint

        return BrokerEndpoint(broker, "apache-kafka", "4.1.1", bootstrap_servers="127.0.0.1:9092",
                              durability={"variant": variant, "honoured": True, "settings": driver_overrides},
                              jvm_options=["-Xms1024m", *(jvm_options or [])])

    def job_entry(self, job):
        return (job["phase"], job["workload_id"], job["variant"])


def run_group(tmp_path, monkeypatch, plan) -> tuple[list, object]:
    from brokerbench.pipeline import benchmark, environment_lease
    from brokerbench.pipeline.context import RunContext

    ctx = RunContext("brokerbench_smoke", "manual__1", "smoke", {"results_root": str(tmp_path)})
    ctx.plan_path.parent.mkdir(parents=True, exist_ok=True)
    ctx.plan_path.write_text(plan.to_json())
    log: list = []
    monkeypatch.setattr(ctx, "environment", lambda side=None: VariantEnv(log, side))
    monkeypatch.setattr(environment_lease, "hold_environment", lambda ctx: None)
    monkeypatch.setattr(benchmark, "worker_processes", lambda ctx: 1)
    monkeypatch.setattr(benchmark, "prepare_job", lambda job: log.append(("prepare", job.workload_id,
                                                                          tuple(job.topics))))
    group = plan.deployments()[0]
    benchmark.deploy(ctx, *group)
    benchmark.prepare_topics(ctx, *group)
    benchmark.run_phase(ctx, *group, "warmup")
    benchmark.run_phase(ctx, *group, "measure")
    return log, ctx


def test_side_b_of_another_variant_is_deployed_afresh_with_its_settings_at_every_change_of_side(
        tmp_path, monkeypatch, caplog):
    path = users_variant(tmp_path, broker={"num.io.threads": "4"}, jvmOptions="-Xmx64m -XX:+UseSerialGC")
    plan = plan_of(brokers=["kafka"], compare_with={"variants": [str(path)]}, results_root=str(tmp_path))
    caplog.set_level(logging.INFO, logger="brokerbench")
    log, ctx = run_group(tmp_path, monkeypatch, plan)
    a_deploy = ("deploy", "A", "fsync-off", "{}", ())
    b_deploy = ("deploy", "B", "fsync-on", '{"num.io.threads": "4"}', ("-Xmx64m", "-XX:+UseSerialGC"))
    deploys = [e for e in log if e[0] in ("deploy", "undeploy")]
    # every deploy stops the broker first: A, then B, A, B, A at the changes of side (ABBA over 4 trials)
    assert deploys == [("undeploy", "kafka"), a_deploy] + [("undeploy", "kafka"), b_deploy,
                                                          ("undeploy", "kafka"), a_deploy] * 2
    measured = [(e[1], e[2]) for e in log if e[0] == "measure"]
    assert measured == [(f"{SMOKE_ID}.trial1", "fsync-off"), (f"{SMOKE_ID}.B.trial1", "fsync-on"),
                        (f"{SMOKE_ID}.B.trial2", "fsync-on"), (f"{SMOKE_ID}.trial2", "fsync-off"),
                        (f"{SMOKE_ID}.trial3", "fsync-off"), (f"{SMOKE_ID}.B.trial3", "fsync-on"),
                        (f"{SMOKE_ID}.B.trial4", "fsync-on"), (f"{SMOKE_ID}.trial4", "fsync-off")]
    # each side's topics are its own (side B's carry its topic config: Kafka's flush per message)
    topics = {e[1]: e[2] for e in log if e[0] == "prepare"}
    assert all("fsync-on" in t for t in topics[f"{SMOKE_ID}.B.trial1"])
    assert all("fsync-off" in t for t in topics[f"{SMOKE_ID}.trial1"])
    # results filed under each side's own variant
    raw = ctx.run_dir / "raw"
    assert list((raw / f"{SMOKE_ID}.B.trial1" / "kafka-latency" / "fsync-on" / "measure").glob("*.jsonl"))
    assert list((raw / f"{SMOKE_ID}.trial1" / "kafka-latency" / "fsync-off" / "measure").glob("*.jsonl"))
    # the provenance of each side, side B's under its own variant, with the JVM options it asked for
    b = json.loads((ctx.run_dir / "provenance" / "kafka__fsync-on.B.json").read_text())
    a = json.loads((ctx.run_dir / "provenance" / "kafka__fsync-off.json").read_text())
    assert (b["side"], b["deployment_of"], b["durability"]["variant"]) == ("B", "fsync-off", "fsync-on")
    assert b["variant_jvm_options"] == ["-Xmx64m", "-XX:+UseSerialGC"] and a["variant_jvm_options"] == []
    assert b["jvm_options"] == ["-Xms1024m", "-Xmx64m", "-XX:+UseSerialGC"]
    assert b["durability"]["settings"]["topicConfig"] == {"flush.messages": "1", "flush.ms": "0"}
    assert "deployment_of" not in a and a["side"] == "A"
    said = caplog.text
    assert said.count("side B: deploying kafka afresh (variant fsync-on)") == 2
    assert said.count("side A: deploying kafka afresh (variant fsync-off)") == 2
    assert "reused" not in said and "another version" not in said


def test_an_aa_redeploy_says_that_nothing_differs(tmp_path, monkeypatch, caplog):
    plan = plan_of(brokers=["kafka"], compare_with={"broker_versions": {"kafka": "4.1.1"}},
                   results_root=str(tmp_path))
    caplog.set_level(logging.INFO, logger="brokerbench")
    log, _ = run_group(tmp_path, monkeypatch, plan)
    assert [e[0] for e in log if e[0] in ("deploy", "undeploy")] == ["undeploy", "deploy"] * 5
    assert caplog.text.count("side B: deploying kafka afresh (same version and settings as side A: an A/A "
                             "redeploy)") == 2
    plan = plan_of(brokers=["kafka"], compare_with={"broker_versions": {"kafka": "3.9.1"}},
                   results_root=str(tmp_path / "other"))
    caplog.clear()
    run_group(tmp_path / "other", monkeypatch, plan)
    assert caplog.text.count("side B: deploying kafka afresh (version 3.9.1)") == 2
    assert caplog.text.count("side A: deploying kafka afresh (version 4.1.1)") == 2


def test_the_aggregation_gives_side_bs_rows_their_own_variants_provenance(tmp_path):
    sys.path.insert(0, str(ROOT / "spark_jobs"))
    from brokerbench_spark.entry import read_provenance, side_provenance

    prov = tmp_path / "provenance"
    prov.mkdir()
    for name, settings in (("kafka__fsync-off.json", {}),
                           ("kafka__fsync-on.B.json", {"topicConfig": {"flush.messages": "1"}})):
        (prov / name).write_text(json.dumps({"implementation": "apache-kafka", "version": "4.1.1",
                                             "durability": {"variant": name.split("__")[1].split(".")[0],
                                                            "honoured": True, "note": "n", "settings": settings}}))
    found = read_provenance(str(tmp_path))
    b = side_provenance(found, {"broker": "kafka", "variant": "fsync-on", "workload": f"{SMOKE_ID}.B.trial3"})
    a = side_provenance(found, {"broker": "kafka", "variant": "fsync-off", "workload": f"{SMOKE_ID}.trial3"})
    assert "flush.messages" in b["durability_settings"] and "flush.messages" not in a["durability_settings"]


# -- refusals -------------------------------------------------------------------------------------------------------


def test_external_refuses_side_b_variants_and_jvm_options_naming_the_field(tmp_path):
    from brokerbench.environments.external.checks import check_plan
    from brokerbench.pipeline.setup import check_side_b

    plan = plan_of(brokers=["kafka"], environment="external").model_copy()
    with pytest.raises(SpecError) as e:
        check_plan(plan, {}, resolve_connections=False)
    assert e.value.field == "compare_with.variants" and "deploys no broker" in e.value.message
    with pytest.raises(SpecError) as e:
        check_side_b(plan, {})
    assert e.value.field == "compare_with.variants"
    path = users_variant(tmp_path, name="small-heap", jvmOptions="-Xmx64m")
    plan = build_plan(load_suite("smoke"), {"brokers": ["kafka"], "variants": [str(path)], "environment": "external"})
    with pytest.raises(SpecError) as e:
        check_plan(plan, {}, resolve_connections=False)
    assert e.value.field == "variants.small-heap.kafka.jvmOptions" and "-Xmx64m" in e.value.message


def test_a_stand_in_without_a_jvm_refuses_jvm_options_naming_the_field(tmp_path):
    from brokerbench.environments.registry import environment_kind

    path = users_variant(tmp_path, jvmOptions="-Xmx64m")
    plan = plan_of(brokers=["kafka"], compare_with={"variants": [str(path)]})
    plan = plan.model_copy(update={"environment_settings": {"broker_implementations": {"kafka": "tansu"}}})
    with pytest.raises(SpecError) as e:
        environment_kind("local").check_plan(plan, {})
    assert e.value.field == "compare_with.variants.fsync-on.kafka.jvmOptions" and "tansu" in e.value.message


# -- a broker that refuses a setting at start -----------------------------------------------------------------------


def refusing_broker(tmp_path, lines: list[str], jvm: bool = True):
    """A LocalBroker whose start runs a process that prints ``lines`` (as a broker's log would) and exits 1."""
    from brokerbench.environments.base import BrokerEndpoint
    from brokerbench.environments.machine.broker import LocalBroker

    class Refusing(LocalBroker):
        broker, implementation, runs_jvm = "kafka", "refusing", jvm

        def _launch(self, broker_settings):
            script = "; ".join(f"echo {json.dumps(line)}" for line in lines) + "; exit 1"
            return {"address": "127.0.0.1:1", "processes": [self.spawn(["sh", "-c", script], "kafka")]}

        def _probe(self, state):
            raise ConnectionRefusedError("not yet")

        def _endpoint(self, state):
            return BrokerEndpoint("kafka", "refusing", "0")

        def durability(self, variant, broker_settings, driver_overrides, state):
            return {}

    return Refusing(tmp_path / "state")


def test_a_setting_the_broker_refuses_at_start_fails_the_deploy_naming_it_and_quoting_the_broker(tmp_path):
    from brokerbench.environments.base import EnvironmentFailure

    refusal = ("org.apache.kafka.common.config.ConfigException: Invalid value abc for configuration num.io.threads: "
               "Not a number of type INT")
    broker = refusing_broker(tmp_path, ["[2026-12-02 05:00:00,000] ERROR Exiting Kafka due to fatal exception "
                                        "(kafka.Kafka$)", refusal, "\tat kafka.Kafka.main(Kafka.scala)"])
    with pytest.raises(EnvironmentFailure) as e:
        broker.start({"num.io.threads": "abc", "num.network.threads": "3"}, "bad", {})
    said = str(e.value)
    assert said.startswith(f"kafka (refusing): refused the setting num.io.threads='abc' at start: "
                           f"{json.dumps(refusal)}; exited during start-up"), said
    assert broker.state()["status"] == "stopped"


def test_jvm_options_the_jvm_refuses_fail_the_deploy_naming_them(tmp_path):
    from brokerbench.environments.base import EnvironmentFailure

    broker = refusing_broker(tmp_path, ["Unrecognized VM option 'NoSuchFlag'",
                                        "Error: Could not create the Java Virtual Machine."])
    with pytest.raises(EnvironmentFailure) as e:
        broker.start({}, "bad", {}, ["-Xmx64m", "-XX:+NoSuchFlag"])
    assert "the JVM refused the variant's jvmOptions -XX:+NoSuchFlag at start: \"Unrecognized VM option " \
           "'NoSuchFlag'\"" in str(e.value), e.value
    stand_in = refusing_broker(tmp_path / "other", [], jvm=False)
    with pytest.raises(EnvironmentFailure) as e:
        stand_in.start({}, "small-heap", {}, ["-Xmx64m"])
    assert "runs no JVM of brokerbench's: the variant's jvmOptions (-Xmx64m) cannot apply" in str(e.value)


def test_an_aws_runs_lifetime_counts_a_deploy_at_every_change_of_side():
    from brokerbench.environments.aws.fleet import deploy_count, expected_minutes

    # 3 brokers x (A, B, A, B, A over 4 trials in ABBA order) against one deploy each without compare_with.variants
    ab, plain = plan_of(), build_plan(load_suite("smoke"), {"variants": ["fsync-off"], "trials": 4})
    assert (deploy_count(ab), deploy_count(plain)) == (15, 3)
    assert deploy_count(plan_of(compare_with={"broker_versions": {"kafka": "3.9.1"}})) == 5 + 1 + 1
    assert expected_minutes(ab) - expected_minutes(plain) > 6.0 * 12


def test_the_refusal_is_the_line_that_names_the_setting_beside_an_error():
    from brokerbench.environments.machine.broker import refusal_in

    settings = {"log.flush.interval.messages": "1", "num.io.threads": "abc"}
    lines = ["num.io.threads = 8", "\tlog.flush.interval.messages = 1",  # a config dump: no error
             "WARN the configuration 'num.io.threads.extra' was supplied but is not a known config",
             'Exception in thread "main" org.apache.kafka.common.config.ConfigException: Invalid value abc for '
             "configuration num.io.threads: Not a number of type INT"]
    assert refusal_in(lines, settings, []) == (
        "refused the setting num.io.threads='abc' at start: \"Exception in thread \\\"main\\\" "
        "org.apache.kafka.common.config.ConfigException: Invalid value abc for configuration num.io.threads: Not a "
        "number of type INT\"; ")
    assert refusal_in(lines[:3], settings, []) == ""
    assert refusal_in(["Invalid maximum heap size: -Xmxabc"], {}, ["-Xmxabc"]).startswith(
        "the JVM refused the variant's jvmOptions -Xmxabc at start")
    # Kafka 4.1.1 on a 64 MB heap: "ERROR Encountered fatal fault: Error starting LogManager", then
    assert refusal_in(["java.lang.OutOfMemoryError: Java heap space"], {}, ["-Xms64m", "-Xmx64m", "-XX:+UseSerialGC"]) \
        == "ran out of memory at start with the variant's jvmOptions -Xms64m -Xmx64m: " \
           "\"java.lang.OutOfMemoryError: Java heap space\"; "


def test_the_aws_install_scripts_start_the_broker_jvms_with_the_variants_options():
    from brokerbench.environments.aws.brokers import render_scripts

    hosts, meta = [{"name": "b0", "address": "10.0.0.1"}], [{"name": "m0", "address": "10.0.0.9"}]
    artifact = {"path": "/opt/brokerbench/artifacts/x.tar", "sha256": "ab" * 32, "logging_api": "log4j2"}
    given = ["-Xms64m", "-Xmx64m", "-XX:+UseSerialGC", "-XX:OnOutOfMemoryError=kill -9 %p"]
    for broker, version, starts in (("kafka", "4.1.1", 1), ("pulsar", "4.0.7", 2)):  # Pulsar: bookie and broker
        text = next(t for h, s, t in render_scripts(broker, version, hosts, meta, {}, artifact=artifact,
                                                     jvm_options=given) if h == "b0" and s == f"{broker}.sh")
        launches = [line for line in text.splitlines() if line.strip().startswith("launch ")]
        assert len(launches) == starts
        for line in launches:
            assert "-Xms64m -Xmx64m -XX:+UseSerialGC '-XX:OnOutOfMemoryError=kill -9 %p'" in line, line
            assert "UseG1GC" not in line and "MaxGCPauseMillis" not in line and "-Xmx6144m" not in line
        default = next(t for h, s, t in render_scripts(broker, version, hosts, meta, {}, artifact=artifact)
                       if h == "b0" and s == f"{broker}.sh")
        assert all("-XX:+UseG1GC" in line for line in default.splitlines() if line.strip().startswith("launch "))
