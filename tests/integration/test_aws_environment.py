"""The aws environment against real loopback endpoints: moto's server mode for
EC2 (via the aws connection's endpoint_url) and a real sshd standing in for the
instances. Provisioning, host setup over SSH, a broker deployed and measured
through SSH, and teardown by tag, including the fault cases."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from aws_fixtures import aws_settings, ec2_client, instances_in_state, moto_ami, moto_server, sshd  # noqa: F401,E402

RUN = "brokerbench_test/manual__aws"


def make_env(moto_server, sshd, tmp_path, run_key=RUN, plan=None, **extra):
    from brokerbench.environments.aws.environment import AwsEnvironment

    return AwsEnvironment(run_key, aws_settings(moto_server, sshd, tmp_path, **extra), plan=plan)


def test_provision_tags_protects_and_is_idempotent_then_teardown_by_tag(moto_server, sshd, tmp_path):
    env = make_env(moto_server, sshd, tmp_path, run_key="t/idempotent")
    fleet = env.provision()
    assert [h["role"] for h in fleet["hosts"]] == ["broker", "client"]
    assert fleet["cost"]["expected_usd"] <= 5.0
    ids = sorted(h["instance_id"] for h in fleet["hosts"])
    # a retried provision task (new object, same run) finds the fleet again by tag
    again = make_env(moto_server, sshd, tmp_path, run_key="t/idempotent").provision()
    assert sorted(h["instance_id"] for h in again["hosts"]) == ids
    assert sorted(instances_in_state(moto_server, "running", "t/idempotent")) == ids

    ec2 = ec2_client(moto_server)
    for iid in ids:
        tags = {t["Key"]: t["Value"] for t in
                ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": [iid]}])["Tags"]}
        assert tags["brokerbench:run"] == "t/idempotent"
        assert tags["brokerbench:role"] in ("broker", "client") and tags["brokerbench:purpose"]
        attr = ec2.describe_instance_attribute(InstanceId=iid, Attribute="instanceInitiatedShutdownBehavior")
        assert attr["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
        ud = ec2.describe_instance_attribute(InstanceId=iid, Attribute="userData")
        import base64

        assert "shutdown -h" in base64.b64decode(ud["UserData"]["Value"]).decode()
    sg = ec2.describe_security_groups(GroupIds=[fleet["security_group"]])["SecurityGroups"][0]
    cidrs = {r["CidrIp"] for p in sg["IpPermissions"] for r in p.get("IpRanges", [])}
    assert cidrs == {"127.0.0.1/32"}  # nothing open to the world

    # teardown from a fresh object whose state dir is lost: found by tag, not by ids
    import shutil

    shutil.rmtree(tmp_path / "state")
    record = make_env(moto_server, sshd, tmp_path, run_key="t/idempotent").teardown()
    assert sorted(record["terminated"]) == ids and record["remaining"] == []
    assert instances_in_state(moto_server, "running", "t/idempotent") == []
    assert make_env(moto_server, sshd, tmp_path, run_key="t/idempotent").teardown()["terminated"] == []


def test_cost_cap_refuses_before_any_instance(moto_server, sshd, tmp_path):
    from brokerbench.environments.base import EnvironmentFailure

    env = make_env(moto_server, sshd, tmp_path, run_key="t/expensive",
                   instance_types={"broker": "i3.4xlarge", "client": "c5.2xlarge", "metadata": "t2.small"},
                   counts={"broker": 3, "client": 4}, cost_cap_usd=1.0)
    with pytest.raises(EnvironmentFailure, match="above the cost cap"):
        env.provision()
    assert instances_in_state(moto_server, "running", "t/expensive") == []
    assert instances_in_state(moto_server, "pending", "t/expensive") == []


def run_security_groups(moto_server, run_key: str) -> list[str]:
    res = ec2_client(moto_server).describe_security_groups(
        Filters=[{"Name": "tag:brokerbench:run", "Values": [run_key]}])
    return [g["GroupId"] for g in res["SecurityGroups"]]


def live_instances(moto_server, run_key: str) -> list[str]:
    return [i for state in ("pending", "running", "stopping", "stopped", "shutting-down")
            for i in instances_in_state(moto_server, state, run_key)]


def test_failure_halfway_through_provisioning_leaves_nothing(moto_server, sshd, tmp_path, monkeypatch):
    """The client instances cannot be created after the brokers were: provision itself
    terminates the brokers and deletes the security group before the error leaves it."""
    from brokerbench.environments.aws import fleet as aws_fleet

    env = make_env(moto_server, sshd, tmp_path, run_key="t/halfway", counts={"broker": 2, "client": 2})
    real = aws_fleet.Fleet.ensure_role
    created = []

    def fail_on_clients(self, role, *a, **kw):
        if role == "client":
            raise RuntimeError("InsufficientInstanceCapacity (injected)")
        out = real(self, role, *a, **kw)
        created.extend(i["InstanceId"] for i in out)
        return out

    monkeypatch.setattr(aws_fleet.Fleet, "ensure_role", fail_on_clients)
    with pytest.raises(RuntimeError, match="InsufficientInstanceCapacity") as err:
        env.provision()
    assert len(created) == 2  # the brokers had been created
    assert live_instances(moto_server, "t/halfway") == []
    assert run_security_groups(moto_server, "t/halfway") == []
    assert any("cleaned up after the failed provision" in n for n in getattr(err.value, "__notes__", []))
    cleanup = json.loads((tmp_path / "state" / "provision-cleanup.json").read_text())
    assert sorted(cleanup["terminated"]) == sorted(created) and len(cleanup["security_groups_deleted"]) == 1
    # the teardown task (run later, fresh object) finds nothing left and succeeds
    monkeypatch.setattr(aws_fleet.Fleet, "ensure_role", real)
    record = make_env(moto_server, sshd, tmp_path, run_key="t/halfway").teardown()
    assert record["terminated"] == [] and record["remaining"] == []


def test_provision_failing_after_create_on_every_try_leaks_nothing(moto_server, sshd, tmp_path, monkeypatch,
                                                                  caplog):
    """Instances are created, then waiting for them fails, on every try Airflow makes
    (retries + 1): Airflow skips the teardown of a failed setup task, so provision
    itself must leave 0 instances and 0 security groups of the run."""
    from brokerbench.dag_factory import DEFAULT_ARGS
    from brokerbench.environments.aws import fleet as aws_fleet
    from brokerbench.environments.base import EnvironmentFailure

    run = "t/fails-every-try"
    attempts = int(DEFAULT_ARGS.get("retries", 0)) + 1
    assert attempts >= 2
    created: list[list[str]] = []

    def fail_after_create(self, ids, *a, **kw):
        created.append(list(ids))
        raise EnvironmentFailure(f"instances not running after 600 s (injected): {ids}")

    monkeypatch.setattr(aws_fleet.Fleet, "wait_running", fail_after_create)
    for attempt in range(attempts):
        # a fresh object per try, as each Airflow try is a new process
        env = make_env(moto_server, sshd, tmp_path, run_key=run, counts={"broker": 2, "client": 1})
        with pytest.raises(EnvironmentFailure, match="injected"):
            env.provision()
        assert live_instances(moto_server, run) == [], f"try {attempt + 1} leaked instances"
        assert run_security_groups(moto_server, run) == [], f"try {attempt + 1} leaked its security group"
    assert len(created) == attempts and all(len(ids) == 3 for ids in created)
    assert len({i for ids in created for i in ids}) == 3 * attempts  # each try created (and removed) its own
    terminated = instances_in_state(moto_server, "terminated", run)
    assert set(terminated) >= {i for ids in created for i in ids}
    assert "cleanup of run t/fails-every-try: terminated" in caplog.text


def test_cleanup_finds_a_dead_provisions_instances_by_tag(moto_server, sshd, tmp_path):
    """The provision process died (SIGKILL) after creating the security group and the
    instances: no state dir, no fleet.json; cleanup_run (the on_failure_callback's
    function) and AwsEnvironment.cleanup_failed_provision find them by tag."""
    from brokerbench.environments.aws import fleet as aws_fleet

    for run, how in (("t/dead-provision-a", "cleanup_run"), ("t/dead-provision-b", "environment")):
        fleet = aws_fleet.Fleet(run, "brokerbench_aws")
        sg = fleet.security_group("127.0.0.1/32", ["kafka"], None)
        launch = {"ImageId": moto_ami(moto_server), "SecurityGroupIds": [sg]}
        ids = [i["InstanceId"] for role, n in (("broker", 2), ("client", 1))
               for i in fleet.ensure_role(role, n, "t3.micro", launch, "test", 60)]
        assert sorted(instances_in_state(moto_server, "running", run)) == sorted(ids)
        if how == "cleanup_run":
            record = aws_fleet.cleanup_run(run, "brokerbench_aws")
        else:
            record = make_env(moto_server, sshd, tmp_path / how, run_key=run).cleanup_failed_provision()
        assert sorted(record["terminated"]) == sorted(ids) and record["security_groups_deleted"] == [sg]
        assert record["errors"] == [] and record["remaining"] == [] and record["security_groups_remaining"] == []
        assert live_instances(moto_server, run) == [] and run_security_groups(moto_server, run) == []
        # idempotent: a second call finds nothing and fails on nothing
        again = aws_fleet.cleanup_run(run, "brokerbench_aws")
        assert again["terminated"] == [] and again["errors"] == []


def test_provision_reuses_consistent_leftovers_and_terminates_the_rest(moto_server, sshd, tmp_path):
    """An earlier attempt died part-way: its security group has no rules yet (died before
    authorizing), a broker was named, another not yet, a client has another instance
    type and one more broker is stopped. The new provision reuses the two brokers (with
    unique names), terminates the client and the stopped broker, creates the client,
    and gives the group its rules back."""
    from brokerbench.environments.aws import fleet as aws_fleet

    run = "t/leftovers"
    ec2 = ec2_client(moto_server)
    fleet = aws_fleet.Fleet(run, "brokerbench_aws")
    sg = fleet.security_group("127.0.0.1/32", ["kafka"], None)
    perms = ec2.describe_security_groups(GroupIds=[sg])["SecurityGroups"][0]["IpPermissions"]
    ec2.revoke_security_group_ingress(GroupId=sg, IpPermissions=perms)
    launch = {"ImageId": moto_ami(moto_server), "SecurityGroupIds": [sg]}
    named = fleet.ensure_role("broker", 1, "t3.micro", launch, "test", 60)[0]["InstanceId"]
    unnamed = ec2.run_instances(ImageId=launch["ImageId"], InstanceType="t3.micro", MinCount=1, MaxCount=1,
                                SecurityGroupIds=[sg], TagSpecifications=[{"ResourceType": "instance", "Tags":
                                fleet.tags("broker", "test")}])["Instances"][0]["InstanceId"]
    stopped = ec2.run_instances(ImageId=launch["ImageId"], InstanceType="t3.micro", MinCount=1, MaxCount=1,
                                SecurityGroupIds=[sg], TagSpecifications=[{"ResourceType": "instance", "Tags":
                                fleet.tags("broker", "test", index=7)}])["Instances"][0]["InstanceId"]
    ec2.stop_instances(InstanceIds=[stopped])
    wrong_type = fleet.ensure_role("client", 1, "t3.small", launch, "test", 60)[0]["InstanceId"]

    env = make_env(moto_server, sshd, tmp_path, run_key=run, counts={"broker": 2, "client": 1})
    try:
        record = env.provision()
        assert record["security_group"] == sg
        assert sorted(record["earlier_attempt"]["kept"]) == sorted([named, unnamed])
        assert set(record["earlier_attempt"]["terminated"]) == {stopped, wrong_type}
        brokers = [h for h in record["hosts"] if h["role"] == "broker"]
        clients = [h for h in record["hosts"] if h["role"] == "client"]
        assert sorted(h["instance_id"] for h in brokers) == sorted([named, unnamed])
        assert len({h["name"] for h in record["hosts"]}) == 3  # unique names
        assert all(h["name"].rsplit("-", 1)[1].isdigit() for h in record["hosts"])
        assert len(clients) == 1 and clients[0]["instance_id"] != wrong_type
        assert clients[0]["instance_type"] == "t3.micro"
        assert sorted(live_instances(moto_server, run)) == sorted(h["instance_id"] for h in record["hosts"])
        group = ec2.describe_security_groups(GroupIds=[sg])["SecurityGroups"][0]
        ports = {p.get("FromPort") for p in group["IpPermissions"] if p.get("IpRanges")}
        assert {22, 9092} <= ports
        assert {r["CidrIp"] for p in group["IpPermissions"] for r in p.get("IpRanges", [])} == {"127.0.0.1/32"}
        assert any(g["GroupId"] == sg for p in group["IpPermissions"] for g in p.get("UserIdGroupPairs", []))
    finally:
        env.teardown()
    assert live_instances(moto_server, run) == [] and run_security_groups(moto_server, run) == []


def test_bad_settings_are_refused_before_any_ec2_call(moto_server, sshd, tmp_path, monkeypatch):
    from brokerbench.environments.aws import fleet as aws_fleet
    from brokerbench.environments.aws.settings_check import AwsSettingsError

    def no_ec2(*a, **kw):
        raise AssertionError("EC2 was called")

    monkeypatch.setattr(aws_fleet.Fleet, "__init__", no_ec2)
    for bad, field in (({"tuning_profile": "nope"}, "tuning_profile"),
                       ({"counts": {"broker": 0, "client": 1}}, "counts.broker"),
                       ({"cost_cap_usd": 0.01}, "cost_cap_usd")):
        env = make_env(moto_server, sshd, tmp_path, run_key="t/refused", **bad)
        with pytest.raises(AwsSettingsError) as err:
            env.provision()
        assert err.value.field.endswith(field)
    assert live_instances(moto_server, "t/refused") == []


def test_host_setup_deploy_workers_metrics_and_teardown_over_ssh(moto_server, sshd, tmp_path):
    env = make_env(moto_server, sshd, tmp_path, run_key="t/full")
    try:
        env.provision()
        hosts = env.setup_hosts()
        assert len(hosts["hosts"]) == 2
        for h in hosts["hosts"]:
            assert h["setup_script"]["returncode"] == 0 and "plan" in h["setup_script"]["mode"]
            assert h["description"]["cores"] and h["disk"]["write_mb_s"]
            assert h["time_sync"]["source"] == "chronyc" or "chrony" in h["time_sync"]["source"]
        assert json.loads((tmp_path / "state" / "known_hosts.json").read_text())

        ep = env.deploy("kafka", {}, "fsync-off", {})
        assert ep.bootstrap_servers and ep.implementation
        env.health("kafka")
        before = env.before_phase("measure", "kafka-test")
        assert [p["host"] for p in before["page_cache"]] == [env.hosts("broker")[0].name]
        # the broker's own metrics (deploy_mode local: the agent's Kafka, its JMX exporter agent on the broker host)
        scraping = env.start_broker_metrics("kafka-test")
        assert scraping and scraping["targets"] == ["kafka@127.0.0.1"], scraping
        from brokerbench.worker.runner import prepare_job  # noqa: F401  (worker package importable)

        job = _kafka_job(ep.to_dict())
        out = tmp_path / "results" / "w.jsonl"
        res = env.run_workers([job], [str(out)], timeout_s=60)
        assert res[0]["returncode"] == 0, res
        lines = [json.loads(l) for l in out.read_text().splitlines()]
        assert lines[0]["record"] == "meta" and lines[-1]["record"] == "end" and lines[-1]["status"] == "ok"

        # Kafka's Java client in the JVM engine: the controller's build is copied to the client host once, and the
        # host's worker runs that copy (the environment variable names it; the host builds nothing)
        from brokerbench.worker import jvm

        built = jvm.ensure_built()
        env.provide_client_engine(str(jvm.engine_dir()))
        shipped = tmp_path / "remote" / "jvm-engine" / built["jar"]["sha256"][:16]
        java_out = tmp_path / "results" / "java.jsonl"
        relayed = _Lines()  # the workers' progress lines, relayed to the "brokerbench" logger
        logger = logging.getLogger("brokerbench")
        level = logger.level
        logger.addHandler(relayed)
        logger.setLevel(logging.INFO)
        try:
            res = env.run_workers([{**job, "client_library": "kafka-clients-java"}], [str(java_out)], timeout_s=60)
        finally:
            logger.removeHandler(relayed)
            logger.setLevel(level)
        assert res[0]["returncode"] == 0, res
        assert json.loads((shipped / "manifest.json").read_text()) == built
        assert (shipped / jvm.JAR_NAME).read_bytes() == (jvm.engine_dir() / jvm.JAR_NAME).read_bytes()
        assert any(f"the JVM engine in {shipped}" in line for line in relayed.lines), relayed.lines[:5]
        lines = [json.loads(l) for l in java_out.read_text().splitlines()]
        assert (lines[0]["client_library"], lines[0]["engine_jar_sha256"]) == ("kafka-clients-java",
                                                                               built["jar"]["sha256"])
        assert lines[-1]["record"] == "end" and lines[-1]["status"] == "ok" and lines[-1]["totals"]["acked"] > 0
        files = env.stop_broker_metrics("kafka-test", str(tmp_path / "results" / "brokermetrics"))
        assert list(files) == [env.hosts("broker")[0].name], files
        scraped = [json.loads(line) for line in Path(files[env.hosts("broker")[0].name]).read_text().splitlines()]
        assert [t["name"] for t in scraped[0]["header"]["targets"]] == ["kafka@127.0.0.1"], scraped[0]
        assert any("kafka_bytes_in_mb_per_s" in (r.get("values") or {}) for r in scraped[1:]), scraped[-2:]
        metrics = env.after_phase("measure", "kafka-test", str(tmp_path / "results" / "hostmetrics"))
        for name, m in metrics.items():
            assert m.get("samples", 0) >= 2, (name, m)
            assert "cpu_percent_avg" in m and "net_tx_mb_s_avg" in m and "disk_util_percent_avg" in m
        env.undeploy("kafka")
    finally:
        record = env.teardown()
    assert record["remaining"] == []
    assert instances_in_state(moto_server, "running", "t/full") == []


def test_host_setup_installs_the_controllers_package_once_and_again_when_stale(moto_server, sshd, tmp_path):
    """remote_python unset: the client host gets <remote_dir>/venv with the wheel built from this tree."""
    import subprocess

    venv = tmp_path / "remote" / "venv"
    env = make_env(moto_server, sshd, tmp_path, run_key="t/install", remote_python=None)
    try:
        env.provision()
        client = next(h for h in env.setup_hosts()["hosts"] if h["role"] == "client")
        install = client["agent"]["install"]
        assert install["installed"] is True and install["origin"].startswith("built from ")
        assert client["agent"]["python_path"] == str(venv / "bin" / "python")
        assert client["agent"]["brokerbench_version"] == "0.1.0"
        # a copy in the venv, with the worker's client libraries, not this source tree
        probe = subprocess.run(
            [str(venv / "bin" / "python"), "-c",
             "import brokerbench, brokerbench.worker.runner, kafka, confluent_kafka, pulsar, pika; "
             "print(brokerbench.__file__)"], capture_output=True, text=True, timeout=120)
        assert probe.returncode == 0, probe.stderr
        assert probe.stdout.strip().startswith(str(venv / "lib"))
        package_id = (venv / "brokerbench-package.id").read_text().strip()
        assert package_id == install["package_id"]

        # a retried host setup (new object): same package id, nothing installed
        again = make_env(moto_server, sshd, tmp_path, run_key="t/install", remote_python=None)
        client = next(h for h in again.setup_hosts()["hosts"] if h["role"] == "client")
        assert client["agent"]["install"] == {"installed": False, "package_id": package_id,
                                              "reason": "already installed"}

        # a host holding another build is brought up to this one
        (venv / "brokerbench-package.id").write_text("0" * 64 + "\n")
        client = next(h for h in make_env(moto_server, sshd, tmp_path, run_key="t/install",
                                          remote_python=None).setup_hosts()["hosts"] if h["role"] == "client")
        assert client["agent"]["install"]["installed"] is True
        assert (venv / "brokerbench-package.id").read_text().strip() == package_id
    finally:
        record = env.teardown()
    assert record["remaining"] == []


class _Lines(logging.Handler):
    """The messages a logger handles, whatever its propagation and the process's log configuration."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _kafka_job(endpoint: dict) -> dict:
    from brokerbench.spec import load_driver, load_workload

    w = load_workload("smoke-1-topic-1-partition-100b")
    d = load_driver("kafka-latency")
    return {"worker": "client-0", "phase": "measure", "workload_id": "smoke", "broker": "kafka",
            "variant": "fsync-off", "workload": w.to_omb_dict(), "driver": d.to_omb_dict(), "endpoint": endpoint,
            "topics": ["bb-aws-test-0"], "subscriptions": ["sub-0"], "duration_s": 3, "interval_s": 1,
            "rate_msg_s": 200, "producers_per_topic": 1, "consumers_per_subscription": 1,
            "consumers_in_subscription": 1}


def test_local_environment_samples_host_metrics_the_same_way(tmp_path):
    import time

    from brokerbench.environments.local import LocalEnvironment

    env = LocalEnvironment("t/local-metrics", {"state_dir": str(tmp_path / "state"), "metrics_interval_s": 0.3})
    env.provision()
    try:
        rec = env.before_phase("measure", "w__d__v__measure")
        assert rec["metrics"][0]["host"] == "localhost" and "error" not in rec["metrics"][0]
        time.sleep(1.5)
        hosts = env.after_phase("measure", "w__d__v__measure", str(tmp_path / "hostmetrics"))
        m = hosts["localhost"]
        assert m["samples"] >= 2 and m["cpu_percent_avg"] >= 0 and m["mem_used_mb_max"] > 0
        assert (tmp_path / "hostmetrics" / "localhost.jsonl").exists()
    finally:
        record = env.teardown()
    assert record["remaining"] == []


def test_sweeper_terminates_only_brokerbench_instances_past_their_lifetime(moto_server):
    import datetime as dt

    from brokerbench.environments.aws.fleet import sweep_expired

    ec2 = ec2_client(moto_server)
    now = dt.datetime.now(dt.timezone.utc)

    def launch(run: str | None, expires: dt.datetime | None) -> str:
        tags = [{"Key": "Name", "Value": f"sweep-{run}"}]
        if run:
            tags.append({"Key": "brokerbench:run", "Value": run})
        if expires:
            tags.append({"Key": "brokerbench:expires-at", "Value": expires.strftime("%Y-%m-%dT%H:%M:%SZ")})
        return ec2.run_instances(ImageId=moto_ami(moto_server), InstanceType="t3.micro", MinCount=1, MaxCount=1,
                                 TagSpecifications=[{"ResourceType": "instance", "Tags": tags}]
                                 )["Instances"][0]["InstanceId"]

    expired = launch("t/sweep-old", now - dt.timedelta(hours=2))
    in_grace = launch("t/sweep-grace", now - dt.timedelta(minutes=5))
    alive = launch("t/sweep-new", now + dt.timedelta(hours=2))
    no_expiry = launch("t/sweep-untagged", None)
    foreign = launch(None, now - dt.timedelta(days=3))  # not brokerbench's: never listed
    ours = {expired, in_grace, alive, no_expiry}

    dry = sweep_expired("brokerbench_aws", dry_run=True)
    assert [e["instance_id"] for e in dry["expired"]] == [expired] and dry["terminated"] == []
    assert set(instances_in_state(moto_server, "running")) >= ours | {foreign}

    record = sweep_expired("brokerbench_aws", grace_minutes=15)
    assert record["terminated"] == [expired]
    assert {e["instance_id"] for e in record["within_lifetime"]} >= {in_grace, alive}
    assert no_expiry in {e["instance_id"] for e in record["without_expiry_tag"]}
    assert not {e["instance_id"] for e in record["expired"] + record["within_lifetime"]
                + record["without_expiry_tag"]} & {foreign}
    running = set(instances_in_state(moto_server, "running"))
    assert expired not in running and {in_grace, alive, no_expiry, foreign} <= running
    ec2.terminate_instances(InstanceIds=[in_grace, alive, no_expiry, foreign])
