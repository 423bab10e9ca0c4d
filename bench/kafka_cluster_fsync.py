"""The cluster DAG's fsync-on Kafka row against Kafka's own ProducerPerformance on the same loopback hosts.

    .venv/bin/python bench/kafka_cluster_fsync.py [--rate 300] [--seconds 15] [--skip-dag]

On the loopback fleet of the aws tests (moto for EC2 and S3, an OpenSSH server on each of 127.0.1.11-15: three
broker hosts, a metadata host, a client host; tests/aws_fixtures.py), in one invocation:

1. ProducerPerformance: the aws environment installs the aws-seed-latency suite's Kafka (3.9.1 in ZooKeeper mode,
   the seed-000 tuning profile, heaps sized for 2 cores) as a 3-node cluster with the same install scripts a run
   uses, the topic is created as the worker creates it (driver ``kafka-replicated`` with the ``fsync-on`` variant:
   replication factor 3, min.insync.replicas=2, flush.messages=1, flush.ms=0), and Kafka's
   ``org.apache.kafka.tools.ProducerPerformance`` of the same release sends ``--rate`` msg/s of 100-byte messages
   with the driver's producer settings (acks=all, linger.ms=1, batch.size=1048576): a 3-s warm-up run, then the
   measured run of ``--seconds`` (the tool before 4.2 cannot leave a warm-up out of its figures); then, on the
   same cluster, the DAG's job (the workload's producer and consumer, confluent-kafka, as the suite runs it) by
   the agent on the client host, and the same producer without the consumer. The cluster is torn down.
2. The DAG: ``airflow dags test brokerbench_aws_seed_latency`` with Kafka alone, fsync-on, ``--rate`` msg/s and
   ``--seconds`` measured after a 3-s warm-up, on the same hosts; its summary row read from moto's S3.

It prints the publish p50 / p99 of each and the ratios of the p50s to ProducerPerformance's (the lines ``VENDOR``,
``WORKER``, ``DAG`` and ``RATIO``). Everything it starts (sshd, moto, brokers) is stopped at the end. About 5 minutes on
the 2-core machine; needs the project's Airflow database (``make setup``).
"""

from __future__ import annotations

import argparse
import csv
import getpass
import io
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "include"))
sys.path.insert(0, str(ROOT / "tests"))

from brokerbench.local_airflow import apply_defaults  # noqa: E402

apply_defaults()
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import aws_fixtures as fx  # noqa: E402
from support.airflow_db import private_airflow_db  # noqa: E402


def _quiet() -> None:
    """moto's request lines and the environment's SSH commands stay out of the output (Airflow's logging
    configuration, loaded with the aws environment, sends them all to the terminal)."""
    for name in ("", "werkzeug", "brokerbench", "airflow", "paramiko", "airflow.task", "botocore"):
        logging.getLogger(name).setLevel(logging.WARNING)


DAG = "brokerbench_aws_seed_latency"
COUNTS = {"broker": 3, "metadata": 1, "client": 1}
BUCKET = "bb-kafka-fsync"
SUITE_SETTINGS = {"broker_versions": {"kafka": "3.9.1"}, "kafka_mode": "zookeeper", "tuning_profile": "seed-000"}
WARMUP_S = 3.0
#: the hosts: brokers, metadata, client in that order (fleet_settings); not the test fleet's 127.0.1.1-8, so that
#: the bench runs beside the tests
ADDRESSES = [f"127.0.1.{i}" for i in range(11, 16)]


class Fleet:
    """moto and the loopback fleet's sshds (as the test fixtures start them), stopped by :meth:`stop`."""

    def __init__(self, base: Path):
        from moto.server import ThreadedMotoServer

        self.base = base
        self.servers: list = []
        port = fx.free_port()
        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.moto.start()
        fx.wait_port(port)
        endpoint = f"http://127.0.0.1:{port}"
        self.moto_server = {"endpoint": endpoint, "port": port}
        os.environ["AIRFLOW_CONN_BROKERBENCH_AWS"] = json.dumps({
            "conn_type": "aws", "login": "testing", "password": "testing",
            "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"}})
        os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
        key = base / "client_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        auth = base / "authorized_keys"
        auth.write_text(Path(f"{key}.pub").read_text())
        auth.chmod(0o600)
        addresses = ADDRESSES
        self.port = fx._port_free_everywhere(addresses)
        for a in addresses:
            (base / a).mkdir()
            self.servers.append(fx.start_sshd(base / a, a, self.port, auth))
        for a in addresses:
            fx.wait_port(self.port, address=a)
        os.environ["AIRFLOW_CONN_BROKERBENCH_SSH"] = json.dumps({
            "conn_type": "ssh", "host": "127.0.0.1", "login": getpass.getuser(), "port": self.port,
            "extra": {"key_file": str(key), "no_host_key_check": True}})
        self.loopback = {"addresses": ADDRESSES, "port": self.port}

    def settings(self, tmp: Path, **extra) -> dict:
        return fx.fleet_settings(self.moto_server, self.loopback, tmp, COUNTS, **extra)

    def stop(self) -> None:
        for proc, log in self.servers:
            fx.stop_sshd(proc, log)
        self.moto.stop()


def _driver():
    from brokerbench.spec import apply_variant, load_driver, load_variant

    return apply_variant(load_driver("kafka-replicated"), load_variant("fsync-on")).to_omb_dict()


def _props(value) -> list[str]:
    if isinstance(value, dict):
        return [f"{k}={v}" for k, v in value.items()]
    return [line.strip() for line in (value or "").splitlines() if "=" in line]


def vendor(fleet: Fleet, tmp: Path, rate: float, seconds: float) -> dict:
    """ProducerPerformance on a cluster the aws environment installs on the fleet, as a run deploys it."""
    from brokerbench import crosscheck
    from brokerbench.environments.aws.environment import AwsEnvironment
    from brokerbench.spec import load_workload
    from brokerbench.worker.job import Job
    from brokerbench.worker.runner import prepare_job

    _quiet()
    env = AwsEnvironment(f"brokerbench_bench/manual__{uuid.uuid4().hex[:8]}",
                         fleet.settings(tmp, **SUITE_SETTINGS))
    _quiet()
    try:
        env.provision()
        env.setup_hosts()
        driver = _driver()
        ep = env.deploy("kafka", {}, "fsync-on", {"topicConfig": driver["topicConfig"]})
        topic = f"bench-fsync-{uuid.uuid4().hex[:6]}"
        job = Job.build(workload=load_workload("latency-1-topic-1-partition-100b").to_omb_dict(), worker="bench",
                        phase="measure", broker="kafka", variant="fsync-on", driver=driver,
                        endpoint=ep.to_dict(), topics=[topic], duration_s=seconds, client_library="confluent-kafka")
        prepare_job(job)  # the topic as the worker's: replication factor 3 and the variant's topic config
        dist = crosscheck.tool_distribution("kafka", ep.version.split()[0])
        producer = _props(driver["producerConfig"])
        runs = []
        for n in (int(rate * WARMUP_S), int(rate * seconds)):
            argv = [crosscheck.distributions.java(), "-Xmx256m", "-XX:+UseG1GC", "-cp", dist.classpath(),
                    "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(n),
                    "--record-size", "100", "--throughput", str(int(rate)),
                    "--producer-props", f"bootstrap.servers={ep.bootstrap_servers}", *producer]
            text = subprocess.run(argv, capture_output=True, text=True, timeout=seconds * 4 + 120).stdout
            runs.append(text)
        summary = [line for line in runs[-1].splitlines() if "50th" in line]
        figs = crosscheck.parse_kafka_producer_performance(runs[-1])
        # the DAG's job on the same cluster right after: the workload's producer and consumer at the rate, through
        # the suite's client library, run by the agent on the client host as a run's measure phase
        # (and the same producer alone, as ProducerPerformance runs: what the consumer adds)
        workers = {}
        for name, consumers in (("worker", 1), ("worker-producer-only", 0)):
            workload = {**load_workload("latency-1-topic-1-partition-100b").to_omb_dict(), "producerRate": rate,
                        "subscriptionsPerTopic": consumers, "consumerPerSubscription": consumers}
            wjob = Job.build(workload=workload, worker=f"bench-{name}", phase="measure", workload_id="bench",
                             broker="kafka", variant="fsync-on", driver=driver, endpoint=ep.to_dict(),
                             topics=[f"bench-fsync-{name}-{uuid.uuid4().hex[:6]}"],
                             subscriptions=["sub-0"] if consumers else [], duration_s=seconds, interval_s=3,
                             client_library="confluent-kafka")
            prepare_job(wjob)
            out = tmp / f"{name}.jsonl"
            env.run_workers([wjob.to_dict()], [str(out)], timeout_s=seconds + 240)
            lines = out.read_text().splitlines() if out.exists() else []
            w = crosscheck.summarise_worker_output(lines)
            end = json.loads(lines[-1]) if lines else {}
            workers[name] = {"p50": w.publish_p50_ms, "p99": w.publish_p99_ms, "e2e_p50": w.e2e_p50_ms,
                             "totals": end.get("totals"), "status": end.get("status"),
                             "host_cpu": (end.get("validity") or {}).get("host_cpu_percent")}
        return {"version": ep.version, "tool": f"ProducerPerformance {dist.version}", "producer": producer,
                "topic_config": driver["topicConfig"], "p50": figs.publish_p50_ms, "p99": figs.publish_p99_ms,
                "achieved": figs.achieved_msg_s, "line": summary[-1] if summary else runs[-1][-500:],
                "workers": workers}
    finally:
        env.teardown()


def dag(fleet: Fleet, tmp: Path, rate: float, seconds: float) -> dict:
    """The seed DAG under ``airflow dags test``, Kafka alone, fsync-on; its summary row."""
    _quiet()
    s3 = fx.s3_client(fleet.moto_server)
    s3.create_bucket(Bucket=BUCKET)
    settings = fleet.settings(tmp)
    for k in ("instance_types", "counts", "cost_cap_usd", "state_dir"):
        settings.pop(k)  # from the suite and the params, as a real run
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    conf = {"brokers": ["kafka"], "variants": ["fsync-on"], "test_duration_minutes": seconds / 60,
            "warmup_duration_minutes": WARMUP_S / 60, "rate_override_msg_s": rate, "interval_seconds": 3,
            "instance_types": {"broker": "t3.micro", "metadata": "t3.micro", "client": "t3.micro"},
            "instance_counts": COUNTS, "cost_cap_usd": 2, "regression_gate": "never",
            "results_root": f"s3://{BUCKET}/{prefix}"}
    env = {**os.environ, "BROKERBENCH_HOME": str(tmp / "home"), "BROKERBENCH_AWS_SETTINGS": json.dumps(settings),
           **private_airflow_db(tmp / "airflow")}
    log = tmp / "dags-test.log"
    with open(log, "w") as out:
        rc = subprocess.run([str(Path(sys.executable).parent / "airflow"), "dags", "test", DAG, "-c", json.dumps(conf)],
                            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=1200).returncode
    keys = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
            for o in p.get("Contents", [])]
    summary = next((k for k in keys if k.endswith("/summary/summary.csv")), None)
    if rc != 0 or summary is None:
        tail = log.read_text().strip().splitlines()[-15:]
        raise SystemExit(f"the DAG run failed (exit {rc}; log {log}):\n" + "\n".join(tail))
    body = s3.get_object(Bucket=BUCKET, Key=summary)["Body"].read().decode()
    row = next(r for r in csv.DictReader(io.StringIO(body)) if r["broker"] == "kafka")
    formed = next((re.sub(r".*?(kafka .*cluster formed in [0-9.]+ s).*", r"\1", line)
                   for line in log.read_text().splitlines() if "cluster formed in" in line), "")
    return {"row": row, "formed": formed}


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=300.0, help="msg/s of 100-byte messages (default 300)")
    ap.add_argument("--seconds", type=float, default=15.0, help="measured seconds (default 15)")
    ap.add_argument("--skip-dag", action="store_true", help="ProducerPerformance only")
    args = ap.parse_args()
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="bb-kafka-fsync-"))
    (tmp / "fleet").mkdir()
    fleet = Fleet(tmp / "fleet")
    try:
        v = vendor(fleet, tmp / "vendor", args.rate, args.seconds)
        print(f"VENDOR {v['tool']} on Apache Kafka {v['version']}, 3 nodes, topic {','.join(_props(v['topic_config']))}, "
              f"{' '.join(v['producer'])}, {args.rate:g} msg/s for {args.seconds:g} s: publish p50 {v['p50']} ms, "
              f"p99 {v['p99']} ms, {v['achieved']} msg/s\n  {v['line']}", flush=True)
        for name, w in v["workers"].items():
            what = "the DAG's job" if name == "worker" else "its producer alone"
            print(f"WORKER brokerbench {name} (confluent-kafka, {what}) on the same cluster after it: publish p50 "
                  f"{_r(w['p50'])} ms, p99 {_r(w['p99'])} ms, e2e p50 {_r(w['e2e_p50'])} ms, {w['totals']}, "
                  f"{w['status']}, client host CPU {w['host_cpu']} %; ratio p50 worker / ProducerPerformance "
                  f"{_ratio(w['p50'], v['p50'])}", flush=True)
        if args.skip_dag:
            return 0
        d = dag(fleet, tmp / "dag", args.rate, args.seconds)
        row = d["row"]
        print(f"DAG {DAG} fsync-on kafka: {row['broker_version']}, {row['client_library']}, acked "
              f"{row['messages_acked']}, received {row['messages_received']}, publish p50 "
              f"{row['publish_latency_p50_ms']} ms, p99 {row['publish_latency_p99_ms']} ms, e2e p50 "
              f"{row['e2e_latency_p50_ms']} ms, status {row['status'][:160]} ({d['formed']})", flush=True)
        print(f"RATIO publish p50 DAG / ProducerPerformance: {_ratio(float(row['publish_latency_p50_ms']), v['p50'])} "
              f"({time.monotonic() - t0:.0f} s in all)")
        return 0
    finally:
        fleet.stop()
        left = fx.processes_under(tmp)
        if left:
            print("left running:", *left, sep="\n  ")


if __name__ == "__main__":
    sys.exit(main())
