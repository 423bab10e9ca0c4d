"""The external environment with ``clients: aws``: the workers run on an aws client fleet (moto's server as
EC2, a real sshd on loopback as every instance: tests/aws_fixtures.py) against a RabbitMQ this module starts on
loopback with the local environment and gives to brokerbench only as an Airflow connection.

A measured phase through the client fleet produces results; the run's instances are terminated afterwards
(found by tag); the cluster's queue and exchange lists are what they were before; the cluster's password
reaches the workers in their environment only, never in a file on the "host"."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from aws_fixtures import aws_settings, instances_in_state, moto_server, sshd  # noqa: F401,E402
from support.cluster_lists import rabbitmq_listing  # noqa: E402

from brokerbench.pipeline import benchmark, environment_lease, setup, teardown  # noqa: E402
from brokerbench.pipeline.context import RunContext  # noqa: E402

pytestmark = pytest.mark.integration

#: a short run: 3 s warm-up, 9 s measured, 200 msg/s
SHORT = {"warmup_duration_minutes": 0.05, "test_duration_minutes": 0.15, "rate_override_msg_s": 200,
         "interval_seconds": 3}


@pytest.fixture(scope="module")
def rabbitmq(tmp_path_factory):
    """RabbitMQ on loopback, started once for the module and stopped at its end."""
    from brokerbench.environments.local import LocalEnvironment

    env = LocalEnvironment("test_external_aws/cluster", {"state_dir": str(tmp_path_factory.mktemp("cluster")),
                                                         "disk_baseline_mb": 0})
    env.provision()
    try:
        yield {"env": env, "endpoint": env.deploy("rabbitmq", {}, "fsync-off", {})}
    finally:
        env.teardown()


def host_python(tmp_path: Path) -> str:
    """The "host"'s Python: this one, importing the brokerbench under test (an SSH session does not inherit
    this process's PYTHONPATH)."""
    import brokerbench

    wrapper = tmp_path / "host-python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={Path(brokerbench.__file__).parents[1]} exec {sys.executable} "
                       '"$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_a_measured_phase_on_the_aws_client_fleet(rabbitmq, moto_server, sshd, tmp_path, monkeypatch):
    uri = rabbitmq["endpoint"].amqp_uris[0]
    monkeypatch.setenv("AIRFLOW_CONN_BROKERBENCH_RABBITMQ", json.dumps({"conn_type": "amqp",
                                                                        "extra": {"amqp_uri": uri}}))
    monkeypatch.setenv("BROKERBENCH_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("BROKERBENCH_AWS_SETTINGS", raising=False)
    aws = aws_settings(moto_server, sshd, tmp_path, counts={"client": 1})
    for key in ("state_dir", "deploy_mode"):
        aws.pop(key)
    aws["remote_python"] = host_python(tmp_path)
    import pika

    from brokerbench.util import run_prefix

    theirs = run_prefix("someone/else") + "-their-queue"  # named like another run's: never deleted
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    conn.channel().queue_declare(theirs, durable=True)
    conn.close()
    before = rabbitmq_listing(rabbitmq)
    print("rabbitmq before:", before)
    ctx = RunContext("brokerbench_smoke", f"manual__{uuid.uuid4().hex[:6]}", "smoke",
                     {"results_root": str(tmp_path / "results"), "environment": "external",
                      "brokers": ["rabbitmq"], "variants": ["fsync-off"], **SHORT})
    setup.validate(ctx)
    plan = ctx.plan()
    plan.environment_settings.update({"clients": "aws", "aws": aws})
    ctx.plan_path.write_text(plan.to_json())
    assert environment_lease.acquire_environment(ctx) is None
    try:
        fleet = setup.provision(ctx) or ctx.environment().provision()
        hosts = setup.setup_hosts(ctx) or json.loads((ctx.environment().state_dir / "hosts.json").read_text())
        benchmark.deploy(ctx, "rabbitmq", "fsync-off")
        benchmark.prepare_topics(ctx, "rabbitmq", "fsync-off")
        benchmark.run_phase(ctx, "rabbitmq", "fsync-off", "warmup")
        benchmark.run_phase(ctx, "rabbitmq", "fsync-off", "measure")
        benchmark.undeploy(ctx, "rabbitmq")
    finally:
        record = teardown.teardown(ctx)
        environment_lease.release_environment(ctx)
    env = ctx.environment()
    fleet = json.loads((env.state_dir / "fleet.json").read_text())
    print("fleet:", [(h["name"], h["role"], h["instance_id"], h["instance_type"]) for h in fleet["hosts"]])
    assert [h["role"] for h in fleet["hosts"]] == ["client"]
    hosts = json.loads((env.state_dir / "hosts.json").read_text())
    assert [h["role"] for h in hosts["hosts"]] == ["client"]
    assert hosts["hosts"][0]["time_sync"] and hosts["hosts"][0]["tuned"]["profile"] == "latency-performance"

    # the measured phase ran on the client host and produced results
    files = sorted((ctx.run_dir / "raw").glob("*/*/*/measure/*.jsonl"))
    assert files, f"no measured result under {ctx.run_dir / 'raw'}"
    intervals = [r for f in files for r in map(json.loads, f.read_text().splitlines()) if r.get("record") == "interval"]
    totals = {k: sum(r[k] for r in intervals) for k in ("sent", "acked", "received", "send_errors")}
    print(f"measured: {len(intervals)} intervals, {totals}")
    assert totals["acked"] > 0 and totals["received"] > 0 and totals["send_errors"] == 0, totals

    # the instances are terminated, the cluster is as it was
    print("teardown:", {k: record.get(k) for k in ("errors", "clusters")},
          "client fleet:", {k: record.get("client_fleet", {}).get(k) for k in ("terminated", "remaining")})
    assert record["errors"] == [], record["errors"]
    assert record["client_fleet"]["terminated"] and record["client_fleet"]["remaining"] == []
    assert instances_in_state(moto_server, "running", ctx.run_key) == []
    after = rabbitmq_listing(rabbitmq)
    print("rabbitmq after:", after)
    assert after == before and theirs in after["queues"]

    # the password went to the workers' environment only (the agent's stdin): the job files on the "host"
    # carry the reference, no file there holds the URI with the password
    from brokerbench.environments.external.connections import cluster_for

    secrets = cluster_for("rabbitmq").secrets()
    assert secrets, "the loopback RabbitMQ's URI has a password"
    remote = Path(aws["remote_dir"])
    specs = [p for p in remote.rglob("run-workers-*.json")]
    assert specs and all("${env:" in p.read_text() for p in specs)
    leaked = [p for p in remote.rglob("*") if p.is_file() and uri.encode() in p.read_bytes()]
    assert leaked == [], leaked


def test_a_fresh_teardown_terminates_the_client_instances_by_tag(moto_server, sshd, tmp_path, monkeypatch):
    """A run that died after provisioning its client fleet: a fresh object's teardown finds the instances by
    the run's tag and terminates them."""
    from brokerbench.environments.external import ExternalEnvironment

    monkeypatch.delenv("BROKERBENCH_AWS_SETTINGS", raising=False)
    aws = aws_settings(moto_server, sshd, tmp_path, counts={"client": 2})
    aws.pop("state_dir")
    aws["remote_python"] = host_python(tmp_path)
    settings = {"clients": "aws", "aws": aws, "state_dir": str(tmp_path / "state")}
    run_key = f"t/external-aws-{uuid.uuid4().hex[:6]}"
    fleet = ExternalEnvironment(run_key, settings).provision()
    assert [h["role"] for h in fleet["hosts"]] == ["client", "client"]
    assert len(instances_in_state(moto_server, "running", run_key)) == 2
    record = ExternalEnvironment(run_key, settings).teardown()
    assert record["errors"] == [] and len(record["client_fleet"]["terminated"]) == 2
    assert instances_in_state(moto_server, "running", run_key) == []
