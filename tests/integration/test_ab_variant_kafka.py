"""An A/B run of a variant on a real local Apache Kafka through the pipeline's steps (tests/support/kafka_ab.py:
validate, provision, host setup, the benchmark group's deploy, prepare, warm-up, measure, undeploy, teardown, as
the DAG's tasks call them), side A fsync-off, side B a variant file of the user's own named fsync-on (Kafka's flush
per message, a broker setting and a JVM option), 5 trials a side in ABBA order in side A's task group. Each change
of side stops the broker and starts a new JVM with that side's settings; side B's topics carry flush.messages=1 on
the broker; the aggregation gives side B's summary rows their variant and their own provenance and side B's
broker its flushes per request; any change the verdicts find names Kafka's log flushes first among its suspects;
and a setting Kafka refuses at start fails that deploy, naming it and quoting Kafka."""

from __future__ import annotations

import csv
import itertools
import json
import logging
import sys
from pathlib import Path

import psutil
import pytest

from brokerbench.metrics import Judgement
from brokerbench.pipeline import benchmark

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.kafka_ab import TRIALS, ab_verdicts, abba, fresh_deploys, run_ab, too_few_usable  # noqa: E402

pytestmark = pytest.mark.integration

BASE = "smoke-1-topic-1-partition-100b"
#: side B's JVM: one flag over brokerbench's G1 defaults that changes nothing the run measures (the heap is
#: committed at start), so that the flush per message is side B's one cause (a small heap: test_suspects_kafka)
SIDE_B_JVM = "-XX:+AlwaysPreTouch"
#: side B's broker setting: fewer I/O threads (8 by default; the load here keeps one or two busy)
SIDE_B_BROKER = {"num.io.threads": "4"}
#: an fsync per produce request (about 0.7 ms on this disk) at up to one request per message: at 1,000 msg/s the
#: flushes hold the partition's log most of the time, at the smoke suite's 200 they hid in the clients' noise
RATE_MSG_S = 1000


def kafka_process(state_dir: Path) -> psutil.Process:
    state = json.loads((state_dir / "kafka" / "broker.json").read_text())
    return psutil.Process(next(e["pid"] for e in state["processes"] if e.get("main")))


def topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("topic", topic)
    return {k: v.value for k, v in admin.describe_configs([resource])[resource].result(timeout=30).items()}


@pytest.mark.timeout(500)
def test_side_b_of_another_variant_runs_on_a_fresh_broker_of_its_own_settings_and_its_flush_is_the_suspect(
        tmp_path, monkeypatch, caplog, local_env):
    state_dir = tmp_path / "run-state"  # run_ab's (the local_env fixture has tmp_path / "state")
    seen: list[dict] = []
    run_item = benchmark._run_item

    def watched(ctx_, env, item, endpoint, phase):
        """What runs during each phase: the broker's process, its JVM flags and configuration, the topic's."""
        proc = kafka_process(state_dir)
        cmd = proc.cmdline()
        topic = benchmark._names(ctx_, item)[0][0]
        seen.append({"side": item.side, "trial": item.trial, "phase": phase, "variant": item.variant,
                     "pid": proc.pid, "pretouch": SIDE_B_JVM in cmd, "g1": "-XX:+UseG1GC" in cmd,
                     "xmx": [f for f in cmd if f.startswith("-Xmx")],
                     "io_threads": "num.io.threads=4" in (state_dir / "kafka" / "server.properties").read_text(),
                     "flush": topic_config(endpoint.bootstrap_servers, topic).get("flush.messages")})
        return run_item(ctx_, env, item, endpoint, phase)

    monkeypatch.setattr(benchmark, "_run_item", watched)
    caplog.set_level(logging.INFO, logger="brokerbench")
    ctx = run_ab(tmp_path, monkeypatch, "fsync-on", {
        "description": "fsync per message, fewer I/O threads, the heap committed at start",
        "kafka": {"driver": {"topicConfig": {"flush.messages": "1", "flush.ms": "0"}},
                  "broker": SIDE_B_BROKER, "jvmOptions": SIDE_B_JVM}},
        rate_msg_s=RATE_MSG_S, client_library="confluent-kafka")
    print("\n".join(json.dumps(s) for s in seen))

    measured = [s for s in seen if s["phase"] == "measure"]
    # ABBA: side A first in odd trials, side B first in even ones (A1 B1, B2 A2, A3 B3, ...)
    assert [(s["side"], s["trial"]) for s in measured] == abba()
    # a new JVM at every change of side (with 5 trials a side: A, B, A, B, A, B: six), the same one between the
    # trials of one side
    runs = [list(g) for _, g in itertools.groupby(measured, key=lambda s: s["side"])]
    assert all(len({s["pid"] for s in run}) == 1 for run in runs), [s["pid"] for s in measured]
    assert len({run[0]["pid"] for run in runs}) == len(runs), [s["pid"] for s in measured]
    for s in seen:  # each side's broker as its variant says: JVM flags, broker setting, the topics' flush
        b = s["side"] == "B"
        assert (s["variant"], s["pretouch"], s["g1"], s["io_threads"], s["xmx"]) == \
            ("fsync-on" if b else "fsync-off", b, True, b, ["-Xmx256m"]), s
        assert s["flush"] == ("1" if b else "9223372036854775807"), s  # Kafka's default: no flush per message
    said = caplog.text
    assert said.count("side B: deploying kafka afresh (variant fsync-on)") == fresh_deploys("B"), said[-3000:]
    assert said.count("side A: deploying kafka afresh (variant fsync-off)") == fresh_deploys("A")
    assert "already running with these settings: reused" not in said
    assert said.count("serving after") == len(runs)

    # the Spark aggregation: side B's rows carry its variant and their own provenance
    ab = ab_verdicts(ctx)
    run_dir = ctx.run_dir
    rows = list(csv.DictReader((run_dir / "summary" / "summary.csv").open()))
    by_side = {side: [r for r in rows if (".B." in r["workload"]) == (side == "B")] for side in "AB"}
    assert sorted(r["workload"] for r in by_side["B"]) == [f"{BASE}.B.trial{k}" for k in range(1, TRIALS + 1)]
    for side, variant_name, flush in (("A", "fsync-off", False), ("B", "fsync-on", True)):
        for r in by_side[side]:
            assert r["variant"] == variant_name and r["broker_version"] == "4.1.1", r
            assert ("flush.messages" in (r["durability_settings"] or "")) is flush, r["durability_settings"]
            assert int(float(r["messages_acked"])) > 0 and int(float(r["send_errors"])) == 0, r
    record = json.loads((run_dir / "provenance" / "kafka__fsync-on.B.json").read_text())
    assert record["variant_jvm_options"] == SIDE_B_JVM.split() and SIDE_B_JVM in record["jvm_options"]
    assert record["deployment_of"] == "fsync-off" and record["side"] == "B"

    # an fsync per request on the leader's append: each side's broker counted apart (side A flushes about twice a
    # second, side B per request), whatever the verdicts
    flushes = {side: sorted(float(r["kafka_log_flushes_per_s"] or 0) for r in by_side[side]) for side in "AB"}
    print(f"log flushes per second per trial: {flushes}")
    assert flushes["B"][0] > max(0.0, 10 * flushes["A"][-1]), flushes
    if too_few_usable(ctx, ab):  # another run loaded the machine: nothing judged, and the product says so
        return
    # about 0.7 ms per flush on a publish p50 of 1-2 ms: which latencies it slows beyond the trials' noise varies from
    # run to run (publish p50 +94 % in one run, +3.6 % in another, none in a third), so every change found is
    # checked: Kafka's log flushes lead its suspects
    for v in (v for v in ab if v["verdict"] in (Judgement.REGRESSED, Judgement.IMPROVED)):
        first = v["suspects"]["suspects"][0]
        assert first["column"].startswith("kafka_log_flush") and first["direction"] == "up", v["suspects"]

    # a setting Kafka refuses at start fails the deploy, naming it and quoting Kafka's own message
    from brokerbench.environments.base import EnvironmentFailure

    with pytest.raises(EnvironmentFailure) as e:
        local_env.deploy("kafka", {"num.io.threads": "abc"}, "bad-io-threads", {})
    print(str(e.value)[:600])
    assert str(e.value).startswith("kafka (apache-kafka): refused the setting num.io.threads='abc' at start: ")
    assert "Invalid value abc for configuration num.io.threads" in str(e.value).splitlines()[0]
