"""The local environment against real broker processes on 127.0.0.1.

Every test starts and stops its own brokers in its own state dir (tmp_path),
on ports allocated at start, so tests can run next to other brokers on this
machine. Round trips use the real client libraries (kafka-python,
pulsar-client, pika). Apache Kafka and Apache Pulsar are the defaults
(tests/integration/test_apache_brokers.py has their versions, durability and
latency checks); the stand-ins tansu and pulsar-lite are asked for by name.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from brokerbench.environments.base import EnvironmentFailure
from brokerbench.environments.local import LocalEnvironment
from brokerbench.environments.machine import RabbitMQBroker
from brokerbench.environments.processes import recorded_processes

pytestmark = pytest.mark.integration


# -- helpers -----------------------------------------------------------------------

def broker_state(env: LocalEnvironment, broker: str) -> dict:
    return json.loads((env.state_dir / broker / "broker.json").read_text())


def recorded(env: LocalEnvironment, broker: str) -> list[dict]:
    return [p for p in recorded_processes(env.state_dir) if p["broker"] == broker]


def is_alive(entry: dict) -> bool:
    try:
        p = psutil.Process(entry["pid"])
        return abs(p.create_time() - entry["create_time"]) < 0.01 and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def listening_ports() -> dict[int, str]:
    return {c.laddr.port: c.laddr.ip for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}


def listeners_under(ports: set[int], state_dir: Path) -> dict[int, str]:
    """The listeners on ``ports`` of processes whose command line names ``state_dir`` (a broker of that state
    directory: its config and logs are there): port -> command line. Another test's process may take a freed
    port, and is not one of these."""
    out = {}
    for c in psutil.net_connections(kind="inet"):
        if c.status == psutil.CONN_LISTEN and c.laddr.port in ports:
            try:
                cmd = " ".join(psutil.Process(c.pid).cmdline()) if c.pid else "?"
            except psutil.Error:
                continue  # gone since
            if cmd == "?" or str(state_dir) in cmd:
                out[c.laddr.port] = cmd[:300]
    return out


def assert_nothing_left(env: LocalEnvironment, broker: str, ports: dict[str, int]) -> None:
    """Every pid recorded for ``broker`` is gone and nothing listens on its ports."""
    entries = recorded(env, broker)
    assert entries, f"no process was recorded for {broker}"
    assert [e for e in entries if is_alive(e)] == []
    listening = listening_ports()
    assert {name: port for name, port in ports.items() if port in listening} == {}


def assert_loopback_only(state: dict) -> None:
    """Every port the broker listens on is bound to a loopback address, and none is 8080."""
    pids = {e["pid"] for e in state["processes"] if is_alive(e)}
    bound = [(c.laddr.ip, c.laddr.port) for c in psutil.net_connections(kind="inet")
             if c.status == psutil.CONN_LISTEN and c.pid in pids]
    assert bound, "the broker listens nowhere"
    assert [b for b in bound if b[0] not in ("127.0.0.1", "::1")] == []
    assert 8080 not in [port for _, port in bound]


def get_one(channel, queue: str, timeout_s: float = 10.0) -> bytes | None:
    """The first message of ``queue`` (basic_get polled until ``timeout_s``), or None."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _, _, body = channel.basic_get(queue, auto_ack=True)
        if body is not None:
            return body
    return None


def stand_ins(env: LocalEnvironment) -> LocalEnvironment:
    """The environment with the quick stand-ins asked for by name (the default is the real brokers)."""
    env.settings.broker_implementations = {"kafka": "tansu", "pulsar": "pulsar-lite"}
    return env


# -- Kafka protocol: tansu (stand-in) -----------------------------------------------------

def test_kafka_tansu_round_trip_and_durability_notes(local_env):
    from kafka import KafkaConsumer, KafkaProducer

    stand_ins(local_env)
    ep = local_env.deploy("kafka", {}, "fsync-off", {})
    assert (ep.broker, ep.implementation) == ("kafka", "tansu")
    assert ep.version.startswith("v0.")
    assert ep.bootstrap_servers.startswith("127.0.0.1:")
    assert ep.durability["honoured"] is True and "memory" in ep.durability["note"]
    state = broker_state(local_env, "kafka")
    assert_loopback_only(state)

    topic = f"bb-test-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=ep.bootstrap_servers, acks="all")
    producer.send(topic, b"hello tansu").get(timeout=15)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=ep.bootstrap_servers, auto_offset_reset="earliest",
                             group_id=None, consumer_timeout_ms=15000)
    assert next(consumer).value == b"hello tansu"
    consumer.close()

    # fsync-on: same broker settings, so the running broker is reused, but tansu cannot honour it
    pid = state["processes"][0]["pid"]
    ep_on = local_env.deploy("kafka", {}, "fsync-on", {"topicConfig": {"flush.messages": "1", "flush.ms": "0"}})
    assert broker_state(local_env, "kafka")["processes"][0]["pid"] == pid
    assert ep_on.durability["variant"] == "fsync-on"
    assert ep_on.durability["honoured"] is False
    assert "memory only" in ep_on.durability["note"] and "flush.messages" in ep_on.durability["note"]

    local_env.undeploy("kafka")
    assert_nothing_left(local_env, "kafka", state["ports"])
    local_env.undeploy("kafka")  # idempotent


# -- Pulsar protocol: pulsar-lite (stand-in) ------------------------------------------------

def test_pulsar_lite_round_trip_restart_and_durability(local_env):
    import pulsar

    stand_ins(local_env)
    ep = local_env.deploy("pulsar", {"journalSyncData": False}, "fsync-off", {})
    assert (ep.broker, ep.implementation) == ("pulsar", "pulsar-lite")
    assert ep.service_url.startswith("pulsar://127.0.0.1:")
    assert ep.durability["honoured"] is True
    state = broker_state(local_env, "pulsar")
    assert_loopback_only(state)  # the metrics server (0.0.0.0:8080 by default) is off

    client = pulsar.Client(ep.service_url, operation_timeout_seconds=10,
                           logger=logging.getLogger("test.pulsar"))
    topic = f"persistent://public/default/bb-test-{uuid.uuid4().hex[:8]}"
    consumer = client.subscribe(topic, "bb-sub")
    producer = client.create_producer(topic)
    producer.send(b"hello pulsar-lite")
    msg = consumer.receive(timeout_millis=10000)
    assert msg.data() == b"hello pulsar-lite"
    consumer.acknowledge(msg)
    client.close()

    # other broker settings: restarted (a new process); pulsar-lite cannot sync per message
    ep_on = local_env.deploy("pulsar", {"journalSyncData": True}, "fsync-on", {})
    state_on = broker_state(local_env, "pulsar")
    assert state_on["processes"][0]["pid"] != state["processes"][0]["pid"]
    assert not is_alive(state["processes"][0])
    assert ep_on.durability["honoured"] is False
    assert "journalSyncData" in ep_on.durability["note"]
    # same settings again: reused
    local_env.deploy("pulsar", {"journalSyncData": True}, "fsync-on", {})
    assert broker_state(local_env, "pulsar")["processes"][0]["pid"] == state_on["processes"][0]["pid"]

    local_env.undeploy("pulsar")
    assert_nothing_left(local_env, "pulsar", {**state["ports"], **{f"2-{k}": v for k, v in state_on["ports"].items()}})


# -- RabbitMQ -------------------------------------------------------------------------------------

def test_rabbitmq_single_node_round_trip(local_env):
    import pika

    ep = local_env.deploy("rabbitmq", {}, "fsync-off", {"queueType": "CLASSIC", "messagePersistence": False})
    assert (ep.broker, ep.implementation, ep.nodes) == ("rabbitmq", "rabbitmq", 1)
    assert ep.version.startswith("3.")
    assert ep.durability["honoured"] is True and "transient" in ep.durability["note"]
    state = broker_state(local_env, "rabbitmq")
    assert_loopback_only(state)
    assert any("epmd" in e["cmd"] for e in state["processes"]), "epmd was not recorded"

    conn = pika.BlockingConnection(pika.URLParameters(ep.amqp_uris[0]))
    ch = conn.channel()
    q = f"bb-test-{uuid.uuid4().hex[:8]}"
    ch.queue_declare(q)
    ch.basic_publish("", q, b"hello rabbitmq")
    assert get_one(ch, q) == b"hello rabbitmq"
    conn.close()

    local_env.undeploy("rabbitmq")
    assert_nothing_left(local_env, "rabbitmq", state["ports"])
    assert_stopped_gracefully(state)


def assert_stopped_gracefully(state: dict) -> None:
    """Every node's own log shows the graceful shutdown that SIGTERM starts (not a kill)."""
    for node in state["nodes"]:
        text = "".join(f.read_text(errors="replace") for f in Path(node["dir"], "log").glob("*.log"))
        assert "SIGTERM received - shutting down" in text, (node["name"], text[-500:])


@pytest.mark.slow
def test_rabbitmq_three_node_cluster_quorum_queue(local_env):
    import pika

    ep = local_env.deploy("rabbitmq", {"nodes": 3}, "fsync-on", {"queueType": "QUORUM", "messagePersistence": True})
    assert ep.nodes == 3 and len(ep.amqp_uris) == 3
    assert "replicated to 3 nodes" in ep.durability["note"]
    state = broker_state(local_env, "rabbitmq")
    broker = RabbitMQBroker(local_env.state_dir)
    assert broker.running_nodes(state) == sorted(n["name"] for n in state["nodes"])
    assert len(broker.running_nodes(state)) == 3

    conn = pika.BlockingConnection(pika.URLParameters(ep.amqp_uris[1]))
    ch = conn.channel()
    ch.confirm_delivery()
    q = f"bb-quorum-{uuid.uuid4().hex[:8]}"
    ch.queue_declare(q, durable=True, arguments={"x-queue-type": "quorum"})
    ch.basic_publish("", q, b"hello quorum", properties=pika.BasicProperties(delivery_mode=2), mandatory=True)
    conn.close()
    # read it back through another node of the cluster
    conn = pika.BlockingConnection(pika.URLParameters(ep.amqp_uris[2]))
    ch = conn.channel()
    assert get_one(ch, q) == b"hello quorum"
    conn.close()

    local_env.undeploy("rabbitmq")
    assert_nothing_left(local_env, "rabbitmq", state["ports"])
    assert_stopped_gracefully(state)


# -- failures: crashed task, dead broker ------------------------------------------------------------

CRASHING_TASK = """
import os, sys
from brokerbench.environments.local import LocalEnvironment
env = LocalEnvironment("dag/run", {"state_dir": sys.argv[1]})
env.provision()
env.deploy("kafka", {}, "fsync-off", {})
env.deploy("pulsar", {}, "fsync-off", {})
os._exit(3)  # the task dies without undeploying anything
"""


def test_teardown_after_a_crashed_task_leaves_no_process(tmp_path):
    state_dir = tmp_path / "state"
    p = subprocess.run([sys.executable, "-c", CRASHING_TASK, str(state_dir)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 3, p.stderr[-2000:]
    entries = recorded_processes(state_dir)
    assert {e["broker"] for e in entries if is_alive(e)} == {"kafka", "pulsar"}, "brokers did not outlive the task"

    ports = set(json.loads((state_dir / "kafka" / "broker.json").read_text())["ports"].values()) | \
        set(json.loads((state_dir / "pulsar" / "broker.json").read_text())["ports"].values())
    assert listeners_under(ports, state_dir), "the brokers' listeners are not seen"

    env = LocalEnvironment("dag/run", {"state_dir": str(state_dir)})  # a new object: only the state dir remains
    record = env.teardown()
    assert {s["broker"] for s in record["stopped"]} >= {"kafka", "pulsar"}
    assert record["remaining"] == [] and record["errors"] == []
    assert [e for e in entries if is_alive(e)] == []
    assert listeners_under(ports, state_dir) == {}

    again = LocalEnvironment("dag/run", {"state_dir": str(state_dir)}).teardown()  # twice is fine
    assert again["stopped"] == [] and again["errors"] == []


def test_teardown_when_provision_never_ran_or_failed_halfway(tmp_path):
    never = LocalEnvironment("dag/run", {"state_dir": str(tmp_path / "never")}).teardown()
    assert never["stopped"] == [] and "does not exist" in never["note"]
    halfway = LocalEnvironment("dag/run", {"state_dir": str(tmp_path / "halfway")})
    halfway.provision()
    (halfway.state_dir / "rabbitmq").mkdir()  # a deploy that died before writing its state
    record = halfway.teardown()
    assert record["stopped"] == [] and record["errors"] == []


def test_a_broker_killed_with_sigkill_is_reported_by_name(local_env):
    local_env.deploy("kafka", {}, "fsync-off", {})
    state = broker_state(local_env, "kafka")
    os.kill(state["processes"][0]["pid"], signal.SIGKILL)
    time.sleep(0.3)
    with pytest.raises(EnvironmentFailure) as err:
        local_env.health("kafka")
    msg = str(err.value)
    assert msg.startswith("kafka (apache-kafka): died") and str(state["processes"][0]["pid"]) in msg
    assert state["address"] in msg and "server.log" in msg and " INFO " in msg  # the broker's log tail

    # the next deploy starts a fresh broker ...
    ep = local_env.deploy("kafka", {}, "fsync-off", {})
    fresh = broker_state(local_env, "kafka")
    assert fresh["processes"][0]["pid"] != state["processes"][0]["pid"]
    assert local_env.health("kafka")["status"] == "serving"
    # ... and a broker that died between deploys is reported by the next deploy
    os.kill(fresh["processes"][0]["pid"], signal.SIGKILL)
    time.sleep(0.3)
    with pytest.raises(EnvironmentFailure, match=r"^kafka \(apache-kafka\): died"):
        local_env.deploy("kafka", {}, "fsync-off", {})
    assert ep.bootstrap_servers == fresh["address"]


def test_a_broker_that_cannot_start_fails_with_its_log(local_env, monkeypatch):
    from brokerbench.environments import machine

    monkeypatch.setattr(machine.TansuBroker, "_binary", lambda self: "/bin/false")
    stand_ins(local_env)
    with pytest.raises(EnvironmentFailure) as err:
        local_env.deploy("kafka", {}, "fsync-off", {})
    msg = str(err.value)
    assert msg.startswith("kafka (tansu): exited during start-up") and "127.0.0.1:" in msg
    assert "/bin/false broker --listener-url" in msg  # the log tail shows what ran


# -- host setup and workers ---------------------------------------------------------------------

def test_setup_hosts_records_what_was_and_was_not_applied(local_env):
    record = local_env.setup_hosts()
    (host,) = record["hosts"]
    assert host["tuned"]["profile"] == "latency-performance"
    assert host["tuned"]["applied"] is False and host["tuned"]["reason"]  # no tuned daemon here
    assert host["time_sync"]["clock_offset_ms"] == 0.0 and host["time_sync"]["synchronised"] is True
    assert "one host" in host["time_sync"]["note"]
    assert host["disk"]["write_mb_s"] > 0 and host["disk"]["fsync_latency_ms"] > 0
    assert host["description"]["cores"] == os.cpu_count() and host["description"]["kernel"]
    assert list(local_env.state_dir.glob(".brokerbench-dd-*")) == []  # test file removed


@pytest.mark.slow
def test_run_workers_relays_progress_and_keeps_partial_results(local_env, tmp_path, caplog):
    from brokerbench.spec import load_driver
    from brokerbench.worker.runner import prepare_job

    ep = local_env.deploy("kafka", {}, "fsync-off", {})
    base = {
        "phase": "measure", "workload_id": "wl", "broker": "kafka", "variant": "fsync-off",
        "workload": {"name": "wl", "topics": 1, "partitionsPerTopic": 1, "messageSize": 100,
                     "subscriptionsPerTopic": 1, "consumerPerSubscription": 1, "producersPerTopic": 1,
                     "producerRate": 200},
        "driver": load_driver("kafka-latency").to_omb_dict(), "endpoint": ep.to_dict(),
        "interval_s": 1, "rate_msg_s": 200, "producers_per_topic": 1,
        "consumers_per_subscription": 1, "consumers_in_subscription": 1,
    }
    # separate consumer groups: two workers on different topics in one group would
    # keep rebalancing each other, which is not what this test is about
    quick = {**base, "worker": "localhost-0", "topics": ["bb-rw-quick"], "subscriptions": ["sub-quick"],
             "duration_s": 3}
    slow = {**base, "worker": "localhost-1", "topics": ["bb-rw-slow"], "subscriptions": ["sub-slow"],
            "duration_s": 300}
    prepare_job(quick)
    prepare_job(slow)
    outs = [str(tmp_path / "raw" / "localhost-0.jsonl"), str(tmp_path / "raw" / "localhost-1.jsonl")]
    with caplog.at_level(logging.INFO, logger="brokerbench"):
        # bound: consumer-group joins make the probe take seconds (two workers join at once); the quick worker's
        # 3-s phase ends well within it, the slow one's 300 s never
        results = local_env.run_workers([quick, slow], outs, timeout_s=35)
    by = {r["worker"]: r for r in results}
    assert by["localhost-0"]["returncode"] == 0 and by["localhost-0"]["error"] is None
    records = [json.loads(line)["record"] for line in Path(outs[0]).read_text().splitlines()]
    assert records[0] == "meta" and records[-1] == "end" and "interval" in records
    assert "timed out after 35 s" in by["localhost-1"]["error"]
    assert Path(outs[1]).exists()  # the killed worker's partial result is kept
    assert any(json.loads(line)["record"] == "interval" for line in Path(outs[1]).read_text().splitlines())
    relayed = [r.getMessage() for r in caplog.records if r.name == "brokerbench"]
    assert any(m.startswith("[localhost-0] ") for m in relayed)
    assert any(m.startswith("[localhost-1] ") for m in relayed)
    assert not [e for e in recorded_processes(local_env.state_dir) if e["broker"] == "worker" and is_alive(e)]
