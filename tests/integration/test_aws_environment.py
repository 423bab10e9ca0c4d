"""The aws environment against real loopback endpoints: moto's server mode for
EC2 (via the aws connection's endpoint_url) and a real sshd standing in for the
instances. Provisioning, host setup over SSH, a broker deployed and measured
through SSH, and teardown by tag, including the fault cases."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from aws_fixtures import (  # noqa: F401,E402
    aws_settings, ec2_client, instances_in_state, moto_ami, moto_server, sshd)

RUN = "brokerbench_test/manual__aws"


def make_env(moto_server, sshd, tmp_path, run_key=RUN, plan=None, **extra):
    from brokerbench.environments.aws import AwsEnvironment

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
    from brokerbench.environments.base import EnvironmentError_

    env = make_env(moto_server, sshd, tmp_path, run_key="t/expensive",
                   instance_types={"broker": "i3.4xlarge", "client": "c5.2xlarge", "metadata": "t2.small"},
                   counts={"broker": 3, "client": 4}, cost_cap_usd=1.0)
    with pytest.raises(EnvironmentError_, match="above the cost cap"):
        env.provision()
    assert instances_in_state(moto_server, "running", "t/expensive") == []
    assert instances_in_state(moto_server, "pending", "t/expensive") == []


def test_failure_halfway_through_provisioning_leaves_nothing_after_teardown(moto_server, sshd, tmp_path,
                                                                            monkeypatch):
    from brokerbench.environments import aws_fleet

    env = make_env(moto_server, sshd, tmp_path, run_key="t/halfway", counts={"broker": 2, "client": 2})
    real = aws_fleet.Fleet.ensure_role

    def fail_on_clients(self, role, *a, **kw):
        if role == "client":
            raise RuntimeError("InsufficientInstanceCapacity (injected)")
        return real(self, role, *a, **kw)

    monkeypatch.setattr(aws_fleet.Fleet, "ensure_role", fail_on_clients)
    with pytest.raises(RuntimeError, match="InsufficientInstanceCapacity"):
        env.provision()
    assert len(instances_in_state(moto_server, "running", "t/halfway")) == 2  # brokers were created
    monkeypatch.setattr(aws_fleet.Fleet, "ensure_role", real)
    record = make_env(moto_server, sshd, tmp_path, run_key="t/halfway").teardown()
    assert len(record["terminated"]) == 2
    assert instances_in_state(moto_server, "running", "t/halfway") == []


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
        from brokerbench.worker.runner import prepare_job  # noqa: F401  (worker package importable)

        job = _kafka_job(ep.to_dict())
        out = tmp_path / "results" / "w.jsonl"
        res = env.run_workers([job], [str(out)], timeout_s=60)
        assert res[0]["returncode"] == 0, res
        lines = [json.loads(l) for l in out.read_text().splitlines()]
        assert lines[0]["record"] == "meta" and lines[-1]["record"] == "end" and lines[-1]["status"] == "ok"
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

    from brokerbench.environments.aws_fleet import sweep_expired

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
