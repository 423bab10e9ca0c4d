"""The seed's latency workload on this machine: which drivers hold it, with how many processes.

50,000 msg/s of 100-byte messages, 1 topic / 1 partition, 1 producer, 1
consumer (Kesque's Kafka-vs-Pulsar setup), against the local brokers. For
each driver, the job is split over 1, then 2 worker processes
(brokerbench.worker.scaleout.split_job: the rate split over the processes,
the one consumer in the first), started as `python -m brokerbench.worker run`
with a synchronized start. Prints one JSON line per driver x processes with
the achieved publish and consume rates, publish-delay p99, publish and
end-to-end latency p50/p99 (merged histograms of all processes and
intervals), CPU per process and whether it "holds": achieved >= 99 % of the
target, every message received, publish-delay p99 <= 50 ms.

    .venv/bin/python bench/seed_latency.py [--seconds 30] [--processes 1,2] [--drivers ...] [--rate 50000]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import uuid
from pathlib import Path

from _common import DEFAULT_DRIVERS, driver_brokers, job

from brokerbench.crosscheck import run_worker_processes
from brokerbench.histogram import LogHistogram
from brokerbench.worker.runner import prepare_job
from brokerbench.worker.scaleout import split_job


def summarise(outs: list[str], target: float) -> dict:
    hs = {k: LogHistogram() for k in ("publish_latency_us", "publish_delay_us", "e2e_latency_us")}
    acked = received = 0
    load_s, cpus, status = 0.0, [], []
    for out in outs:
        recs = [json.loads(l) for l in open(out)] if os.path.exists(out) else []
        for r in recs:
            if r["record"] == "interval":
                for k in hs:
                    hs[k].merge(LogHistogram.from_dict(r[k]))
            if r["record"] == "end":
                acked += r["totals"]["acked"]
                received += r["totals"]["received"]
                load_s = max(load_s, r.get("load_s") or 0)
                cpus.append(r["validity"]["cpu_percent"])
                status.append(r["status"] if r["status"] == "ok" else f"error: {r['error']}")
    ms = lambda h, p: None if h.percentile(p) is None else round(h.percentile(p) / 1000, 2)  # noqa: E731
    pub_rate = acked / load_s if load_s else 0
    cons_rate = received / load_s if load_s else 0
    delay99 = ms(hs["publish_delay_us"], 99)
    holds = bool(status and all(s == "ok" for s in status) and pub_rate >= 0.99 * target
                 and received >= acked and delay99 is not None and delay99 <= 50)
    return {"publish_rate_msg_s": round(pub_rate), "consume_rate_msg_s": round(cons_rate),
            "publish_delay_p99_ms": delay99, "publish_delay_p50_ms": ms(hs["publish_delay_us"], 50),
            "publish_latency_p50_ms": ms(hs["publish_latency_us"], 50),
            "publish_latency_p99_ms": ms(hs["publish_latency_us"], 99),
            "e2e_latency_p50_ms": ms(hs["e2e_latency_us"], 50), "e2e_latency_p99_ms": ms(hs["e2e_latency_us"], 99),
            "cpu_percent_per_process": cpus, "status": status, "holds": holds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rate", type=float, default=50_000)
    ap.add_argument("--processes", default="1,2")
    ap.add_argument("--drivers", default=",".join(DEFAULT_DRIVERS))
    args = ap.parse_args()
    with driver_brokers(args.drivers) as targets:
        for lib, broker, ep in targets:
            for n in [int(x) for x in args.processes.split(",")]:
                topic = f"seed-{uuid.uuid4().hex[:8]}"
                base = job(broker, ep, lib, rate=args.rate, duration_s=args.seconds, topic=topic,
                           interval_s=10, kind="latency")
                prepare_job(base)
                jobs = split_job(base, n, start_lead_s=12)
                runs = run_worker_processes(jobs, Path(tempfile.mkdtemp(prefix="bb-seed-")), args.seconds + 120)
                outs = [str(out) for _, out, _ in runs]
                print(json.dumps({"driver": lib, "broker": broker, "implementation": ep.get("implementation"),
                                  "version": ep.get("version"),
                                  "processes": len(jobs), "target_rate_msg_s": args.rate, "seconds": args.seconds,
                                  **summarise(outs, args.rate)}), flush=True)


if __name__ == "__main__":
    main()
