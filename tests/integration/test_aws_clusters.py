"""The aws environment's install path on a loopback fleet: each moto instance is a host of its own (an sshd on
127.0.1.x, its own directories), ``deploy_mode: install`` runs the broker scripts there with artifacts the
controller resolved from Maven Central, and each broker forms a 3-node cluster. On it, a replicated workload
runs while one broker node is killed (SIGKILL) halfway through the measured phase: every message the producer
saw acknowledged must reach the consumer. One fleet serves the three brokers, one after another."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from aws_fixtures import fleet_settings, instances_in_state, loopback_fleet, moto_server, processes_under, sshd  # noqa: F401,E402

RUN = "brokerbench_test/manual__clusters"
COUNTS = {"broker": 3, "metadata": 1, "client": 1}
VERSIONS = {"kafka": "4.1.1", "pulsar": "4.0.7", "rabbitmq": "package"}
#: the measured phase (s), and how many of its 1-s intervals pass before a node is killed
PHASE_S, KILL_AFTER_INTERVALS = 30, 8
RATE_MSG_S = 200

log = logging.getLogger("brokerbench")


@pytest.fixture(scope="module")
def fleet(moto_server, sshd, loopback_fleet, tmp_path_factory):
    from brokerbench.environments.aws.environment import AwsEnvironment

    tmp = tmp_path_factory.mktemp("clusters")
    env = AwsEnvironment(RUN, fleet_settings(moto_server, loopback_fleet, tmp, COUNTS, broker_versions=VERSIONS))
    try:
        env.provision()
        env.setup_hosts()
        yield env, tmp
    finally:
        record = env.teardown()
        assert record["remaining"] == [] and not record["errors"], record
        assert instances_in_state(moto_server, "running", RUN) == []
        # nothing brokerbench started is left on any host
        left = [p for p in Path(tmp / "remote").rglob("pids/*.pid")]
        assert left == [], left
        assert processes_under(tmp) == []


def _job(broker: str, driver: str, endpoint: dict, topic: str) -> dict:
    from brokerbench.spec import load_driver, load_workload

    w = load_workload("smoke-1-topic-1-partition-100b")
    return {"worker": "client-0", "phase": "measure", "workload_id": "node-kill", "broker": broker,
            "variant": "as-configured", "workload": w.to_omb_dict(), "driver": load_driver(driver).to_omb_dict(),
            "endpoint": endpoint, "topics": [topic], "subscriptions": ["sub-0"], "duration_s": PHASE_S,
            "interval_s": 1, "rate_msg_s": RATE_MSG_S, "producers_per_topic": 1, "consumers_per_subscription": 1,
            "consumers_in_subscription": 1}


def _victim(env, broker: str, endpoint: dict, topic: str) -> int:
    """The broker node whose loss hurts most: Kafka's partition leader, the Pulsar broker that owns the topic,
    the RabbitMQ node that leads the quorum queue (the first: the queue is declared there; the clients are
    connected to the others, as the driver does not reconnect)."""
    addresses = [h.address for h in env.hosts("broker")]
    if broker == "kafka":
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=endpoint["bootstrap_servers"].split(","))
        try:
            partition = admin.describe_topics([topic])[0]["partitions"][0]
            leader = partition.get("leader_id", partition.get("leader"))
        finally:
            admin.close()
        return int(leader) - 1  # node.id = host index + 1
    if broker == "pulsar":
        with urllib.request.urlopen(f"{endpoint['http_url']}/lookup/v2/topic/persistent/public/default/{topic}",
                                    timeout=10) as r:
            owner = json.loads(r.read())["brokerUrl"]
        return next(i for i, a in enumerate(addresses) if f"//{a}:" in owner)
    return 0


def _pulsar_backlog(http_url: str, topic: str, subscription: str, at_least: int, timeout_s: float = 180) -> int:
    """The subscription's backlog (messages kept for it, not acknowledged by its consumer), asked until the topic
    has loaded on a serving broker and holds at least ``at_least``."""
    deadline, backlog = time.monotonic() + timeout_s, -1
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{http_url}/admin/v2/persistent/public/default/{topic}/stats",
                                        timeout=30) as r:
                backlog = int(json.loads(r.read())["subscriptions"][subscription]["msgBacklog"])
            if backlog >= at_least:
                return backlog
        except Exception as e:  # noqa: BLE001 - the topic is still loading
            log.info("pulsar stats of %s: %s", topic, e)
        time.sleep(3)
    return backlog


def _intervals_written(env, topic: str) -> int:
    host = env.hosts("client")[0]
    res = host.run(f"cat {env.host_dir(host)}/results/*{topic}*.jsonl 2>/dev/null | grep -c '\"interval\"'")
    return int((res.stdout.strip() or "0").splitlines()[-1])


#: a figure each node's endpoint serves in any phase, per broker and role (the JVMs' GC, RabbitMQ's memory), and
#: the bookie's journal sync
EVERY_NODE = {("kafka", "broker"): "kafka_gc_collections_per_s", ("pulsar", "broker"): "pulsar_gc_time_ms_per_s",
              ("pulsar", "bookie"): "pulsar_bookie_journal_sync_mean_ms",
              ("rabbitmq", "node"): "rabbitmq_resident_memory_mb"}


def _assert_every_node_scraped(env, broker: str, scraping: dict | None, files: dict) -> None:
    """The brokers' own metrics of the phase: a scraper on each broker host read its own node's endpoints (bound to
    the host's address: Kafka's JMX exporter agent, Pulsar's broker and bookie, RabbitMQ's rabbitmq_prometheus), and
    its file came back named after the host."""
    hosts = env.hosts("broker")
    assert scraping and not any("error" in r for r in scraping["hosts"].values()), scraping
    assert sorted(files) == sorted(h.name for h in hosts), files
    seen = []
    for h in hosts:
        lines = [json.loads(line) for line in Path(files[h.name]).read_text().splitlines()]
        targets = lines[0]["header"]["targets"]
        assert {t["node"] for t in targets} == {h.address}, targets
        assert {t["role"] for t in targets} == ({"broker", "bookie"} if broker == "pulsar" else
                                                {"node" if broker == "rabbitmq" else "broker"}), targets
        for t in targets:
            metric = EVERY_NODE[(broker, t["role"])]
            read = [r for r in lines[1:] if r.get("target") == t["name"] and metric in (r.get("values") or {})]
            assert read, (t["name"], metric, lines[-3:])
            seen.append(f"{t['name']} {len(read)} scrapes")
    print(f"BROKER-METRICS {broker}: " + ", ".join(seen), flush=True)


@pytest.mark.parametrize("broker, driver", [("kafka", "kafka-replicated"), ("pulsar", "pulsar-replicated"),
                                            ("rabbitmq", "rabbitmq-quorum")])
def test_a_3_node_cluster_loses_no_acknowledged_message_when_a_node_is_killed(fleet, broker, driver):
    from brokerbench.faults import unavailability

    env, tmp = fleet
    started = time.monotonic()
    ep = env.deploy(broker, {}, "as-configured", {})
    deploy_s = time.monotonic() - started
    try:
        cluster, replication = ep.durability["cluster"], ep.durability["replication"]
        assert ep.nodes == 3 and cluster["nodes_seen"] == 3, cluster
        assert replication["factor"] == 3 and replication["min_insync"] == 2, replication
        if broker == "pulsar":
            assert cluster["bookies_seen"] == 3, cluster
        if broker in ("kafka", "pulsar"):  # from Maven Central, through the controller, never the archive
            assert cluster["artifact"]["tar_sha256"] and cluster["artifact"]["artifact"].startswith("org.apache.")
        env.health(broker)

        from brokerbench.worker.runner import prepare_job

        topic = f"bb-kill-{broker}"
        job = _job(broker, driver, ep.to_dict(), topic)
        prepare_job(job)  # topics and subscriptions, created by the controller as the pipeline does
        out = tmp / "results" / f"w-{topic}.jsonl"
        results: list = []
        scraping = env.start_broker_metrics(f"node-kill-{broker}")  # every node's own endpoints, as a phase does
        worker = threading.Thread(target=lambda: results.extend(env.run_workers(
            [job], [str(out)], timeout_s=PHASE_S + 240)), daemon=True)
        worker.start()
        deadline = time.monotonic() + 240
        while _intervals_written(env, topic) < KILL_AFTER_INTERVALS:
            assert worker.is_alive() and time.monotonic() < deadline, (results, "no intervals")
            time.sleep(0.5)
        victim = _victim(env, broker, ep.to_dict(), topic)
        killed = env.kill_broker_node(broker, victim)
        worker.join(PHASE_S + 300)
        assert not worker.is_alive() and results, "the worker did not end"
        _assert_every_node_scraped(env, broker, scraping, env.stop_broker_metrics(
            f"node-kill-{broker}", str(tmp / "brokermetrics" / broker)))

        lines = [json.loads(line) for line in out.read_text().splitlines()]
        end = lines[-1]
        assert end["record"] == "end", end
        totals = end["totals"]
        intervals = [r for r in lines if r["record"] == "interval"]
        invalid = (end.get("validity") or {}).get("invalid_reasons", [])
        window = unavailability(intervals, int(killed["at"] * 1e9))
        log.info("%s node kill: deploy %.1f s (%s); killed %s (node %d); totals %s; unavailable %s; status %s %s",
                 broker, deploy_s, cluster["summary"], killed["host"], victim, totals, window, end["status"],
                 end.get("error") or "")
        print(f"\nNODE-KILL {broker}: deploy_s={deploy_s:.1f} acked={totals['acked']} received={totals['received']} "
              f"send_errors={totals['send_errors']} unavailable_s={window['unavailable_s']} "
              f"recovered_after_s={window['recovered_after_s']}", flush=True)
        assert totals["acked"] >= RATE_MSG_S * KILL_AFTER_INTERVALS * 0.5, totals
        if broker == "pulsar":
            # Pulsar as the seeds ran it - 3 bookies, ensemble 3 - cannot open a ledger with one bookie gone: the
            # topic takes no writes and does not load on another broker until the node is back. So the messages
            # acknowledged but not yet received are counted once the node is back, in the subscription's backlog
            assert window["ended_unavailable"], window
            env.start_broker_node(broker, victim)
            missing = totals["acked"] - totals["received"]
            backlog = _pulsar_backlog(ep.http_url, topic, "sub-0", at_least=missing)
            print(f"NODE-KILL pulsar: {missing} acknowledged messages not received in the phase; backlog of sub-0 "
                  f"once the node is back: {backlog}", flush=True)
            assert backlog >= missing, (backlog, totals)
        else:
            # every acknowledged message was received (counted over the phase; the drain waits for the consumers)
            assert totals["received"] >= totals["acked"], totals
            assert window["ended_unavailable"] is False, window
            assert not any("did not catch up" in r for r in invalid), end
        # a phase with an outage is no clean measurement: its row is invalid, never a baseline
        if window["unavailable_intervals"]:
            assert any(r.startswith("unavailable: ") for r in invalid), (invalid, window)
    finally:
        env.undeploy(broker)
    # the nodes are gone: nothing of this broker answers
    with pytest.raises(Exception):
        env.health(broker)


def test_static_hosts_run_the_same_path_without_any_ec2_call(sshd, loopback_fleet, tmp_path):
    """Machines a user already has: ``static_hosts`` (two loopback hosts the moto fleet above does not use); the
    aws connection names nothing that exists, so any EC2 call would fail the test."""
    from brokerbench.environments.aws.environment import AwsEnvironment

    broker_addr, client_addr = loopback_fleet["addresses"][-2:]
    settings = {"static_hosts": [{"address": broker_addr, "role": "broker", "name": "rack1-a"},
                                 {"address": client_addr, "role": "client"}],
                "aws_conn_id": "no_such_connection", "ssh_port": loopback_fleet["port"],
                "remote_dir": str(tmp_path / "remote"), "remote_python": sys.executable,
                "data_dir": str(tmp_path / "data"), "state_dir": str(tmp_path / "state"),
                "broker_versions": {"rabbitmq": "package"}, "disk_baseline_mb": 4, "time_sync_wait_s": 2}
    plan = SimpleNamespace(items=[SimpleNamespace(broker="rabbitmq")])  # the run's brokers: RabbitMQ alone
    env = AwsEnvironment("brokerbench_test/manual__static", settings, plan=plan)
    try:
        fleet = env.provision()
        assert [(h["name"], h["role"], h["address"]) for h in fleet["hosts"]] == [
            ("rack1-a", "broker", broker_addr), ("client-0", "client", client_addr)]
        hosts = env.setup_hosts()["hosts"]
        assert all(h["tuned"]["applied"] is False for h in hosts)  # not this run's machines: unchanged
        ep = env.deploy("rabbitmq", {}, "fsync-off", {})
        assert ep.amqp_uris == [f"amqp://guest:guest@{broker_addr}:5672/%2F"]
        assert ep.durability["cluster"]["nodes_seen"] == 1
        job = _job("rabbitmq", "rabbitmq-default", ep.to_dict(), "bb-static")
        job["duration_s"] = 3
        from brokerbench.worker.runner import prepare_job

        prepare_job(job)
        out = tmp_path / "w.jsonl"
        res = env.run_workers([job], [str(out)], timeout_s=120)
        assert res[0]["returncode"] == 0, res
        end = json.loads(out.read_text().splitlines()[-1])
        assert end["status"] == "ok" and end["totals"]["received"] == end["totals"]["acked"] > 0, end
    finally:
        record = env.teardown()
    assert record["errors"] == [] and "no machine terminated" in record["note"], record
    assert [h["script_processes"] for h in record["host_processes"]] == [["rabbitmq"], []]
    assert processes_under(tmp_path) == []
