"""The cost of watching: an A/B run whose side B scrapes the broker's own metrics and side A does not.

One broker is deployed once on this machine (the local environment's deploy: Kafka with the JMX exporter agent,
RabbitMQ with rabbitmq_prometheus, Pulsar's /metrics), then ``--trials`` trials per side in ABBA order, each a
worker job of ``--seconds`` at the nightly suite's rate and message size (5,000 msg/s, 100 bytes, one
producer and one consumer) through the nightly suite's client library, on a topic of its own. Side B runs the
broker metrics scraper (brokerbench.environments.brokermetrics, every ``--interval`` s, as a run does) during
its trials. Each metric is judged B against A with the product's A/B test (brokerbench.abtest.compare, 95 %):
a scraper that costs the broker latency shows as "B slower". Also printed: the scraper's CPU (% of one core,
from its process's user + system time over its life) and its scrape time per target (ms, median and max).

    .venv/bin/python bench/metrics_cost.py --broker rabbitmq [--trials 6] [--seconds 20] [--library pika]

Prints one line per trial, then per metric the medians of A and B, the ratio's interval and the verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from brokerbench.abtest import compare
from brokerbench.crosscheck import run_worker, worker_job
from brokerbench.environments import brokermetrics
from brokerbench.environments.machine.runtime import Machine

#: the nightly suite's client libraries (include/suites/nightly-latency.yaml)
NIGHTLY_LIBRARY = {"kafka": "confluent-kafka", "pulsar": "pulsar-client-java", "rabbitmq": "amqp-client-java"}
METRICS = [("publish_p50_ms", "publish p50 (ms)"), ("publish_p99_ms", "publish p99 (ms)"),
           ("e2e_p99_ms", "end-to-end p99 (ms)")]


def _interrupted(*_) -> None:
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", required=True, choices=["kafka", "pulsar", "rabbitmq"])
    ap.add_argument("--trials", type=int, default=6, help="trials per side (ABBA order)")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=5.0, help="first seconds of each trial left out")
    ap.add_argument("--rate", type=float, default=5000.0)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--interval", type=float, default=1.0, help="the scraper's interval, s")
    ap.add_argument("--library", help="client library (default: the nightly suite's)")
    a = ap.parse_args()
    library = a.library or NIGHTLY_LIBRARY[a.broker]
    # a SIGTERM tears the broker down too
    signal.signal(signal.SIGTERM, _interrupted)
    if library.endswith("-java"):
        from brokerbench.worker import jvm

        jvm.ensure_built(progress=lambda line: print(line, flush=True))
    work = Path(tempfile.mkdtemp(prefix="metrics-cost-"))
    machine = Machine("metrics-cost", {"state_dir": str(work / "state")})
    sides = {"A": {m: [] for m, _ in METRICS}, "B": {m: [] for m, _ in METRICS}}
    cpu, scrape_ms = [], []
    try:
        endpoint = machine.deploy(a.broker, {}, "fsync-off", {}).to_dict()
        targets = machine.metrics_targets()
        print(f"{a.broker}: {endpoint.get('implementation')} {endpoint.get('version')}; targets "
              f"{[t.name for t in targets]}; {library}, {a.rate:g} msg/s, {a.size} B, {a.seconds:g} s trials",
              flush=True)
        order = ["A", "B", "B", "A"] * ((a.trials + 1) // 2)
        for i, side in enumerate(order[:2 * a.trials]):
            out = work / f"scrape-{i}.jsonl"
            if side == "B":
                brokermetrics.start(str(work / "state"), str(out), "localhost", a.interval, targets,
                                    watch_pid=os.getpid())
                pid = int(Path(str(out) + ".pid").read_text())
                proc = psutil.Process(pid)
                t0 = time.monotonic()
            job = worker_job(a.broker, endpoint, library, a.rate, a.size, a.seconds, consumer=True)
            fig = run_worker(job, work / f"trial-{i}", a.seconds, warmup_s=a.warmup)
            if side == "B":
                times = proc.cpu_times()
                cpu.append((times.user + times.system) / (time.monotonic() - t0) * 100)
                brokermetrics.stop(str(out))
                scrape_ms += [json.loads(l)["scrape_ms"] for l in out.read_text().splitlines()[1:] if l.strip()]
            print(json.dumps({"trial": i + 1, "side": side, **{m: getattr(fig, m) for m, _ in METRICS},
                              "achieved_msg_s": fig.achieved_msg_s, "note": fig.note[:200]}), flush=True)
            for m, _ in METRICS:
                v = getattr(fig, m)
                if v is not None and v > 0:
                    sides[side][m].append(v)
    finally:
        machine.teardown()
    print(f"\n{a.broker}: the cost of watching, {a.trials} trials a side (A: no scraper, B: scraper every "
          f"{a.interval:g} s)")
    for m, label in METRICS:
        c = compare(sides["A"][m], sides["B"][m], higher_is_better=False)
        lo = "-" if c.ci_low is None else f"{c.ci_low:.3f}"
        hi = "-" if c.ci_high is None else f"{c.ci_high:.3f}"
        print(f"  {label:<22} A median {c.median_a:.3f}  B median {c.median_b:.3f}  B/A {c.ratio:.3f} "
              f"[{lo}, {hi}]  {c.verdict}")
    if cpu:
        print(f"  scraper CPU: median {statistics.median(cpu):.2f} % of one core (max {max(cpu):.2f} %); "
              f"scrape time per target: median {statistics.median(scrape_ms):.1f} ms, max {max(scrape_ms):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
