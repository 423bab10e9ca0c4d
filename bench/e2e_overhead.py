"""Measurement overhead: end-to-end latency reported by the worker vs a bare client ping-pong.

For each driver, on the same local broker in one run:

- bare:   the library alone, one message at a time: send, wait until the
          consumer (same process) receives it, record receive - send (µs);
          no stamp parsing, no histograms, no schedule;
- worker: brokerbench's worker at a low constant rate (default 200 msg/s,
          far below every ceiling), 1 producer, 1 consumer: the e2e p50/p99
          from its merged interval histograms.

overhead_p50_ms = worker p50 - bare p50. Prints one JSON line per driver.

    .venv/bin/python bench/e2e_overhead.py [--messages 500] [--rate 200] [--seconds 5] [--drivers ...]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid

from _common import driver_brokers, job

from brokerbench.histogram import LogHistogram
from brokerbench.worker.runner import prepare_job, run_job


def ping_confluent(ep, topic, n):
    from confluent_kafka import Consumer, Producer
    p = Producer({"bootstrap.servers": ep["bootstrap_servers"], "linger.ms": 0, "acks": 1})
    c = Consumer({"bootstrap.servers": ep["bootstrap_servers"], "group.id": f"ping-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "latest", "fetch.wait.max.ms": 100, "session.timeout.ms": 6000})
    c.subscribe([topic])
    out = []
    try:
        while not out or len(out) < n + 20:
            t0 = time.time_ns()
            p.produce(topic, b"x" * 100)
            p.flush(5)
            deadline = time.monotonic() + 10
            m = None
            while time.monotonic() < deadline:
                m = c.poll(0.1)
                if m is not None and m.error() is None:
                    break
            if m is not None:
                out.append(time.time_ns() - t0)
    finally:
        c.close()
    return out[20:]  # the first pings include the group join


def ping_pulsar(ep, topic, n):
    import pulsar
    cl = pulsar.Client(ep["service_url"], logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    c = cl.subscribe(f"persistent://public/default/{topic}", f"ping-{uuid.uuid4().hex[:6]}")
    p = cl.create_producer(f"persistent://public/default/{topic}", batching_enabled=False)
    out = []
    for _ in range(n + 20):
        t0 = time.time_ns()
        p.send_async(b"x" * 100, lambda _r, _m: None)
        m = c.receive(10_000)
        out.append(time.time_ns() - t0)
        c.acknowledge(m)
    cl.close()
    return out[20:]


def ping_pika(ep, topic, n):
    import pika
    conn = pika.BlockingConnection(pika.URLParameters(ep["amqp_uris"][0]))
    ch = conn.channel()
    q = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(q, topic, routing_key="ping")
    gen = ch.consume(q, auto_ack=True, inactivity_timeout=10)
    out = []
    for _ in range(n + 20):
        t0 = time.time_ns()
        ch.basic_publish(topic, "ping", b"x" * 100)
        next(gen)
        out.append(time.time_ns() - t0)
    conn.close()
    return out[20:]


PING = {"confluent-kafka": ping_confluent, "kafka-python": ping_confluent, "pulsar-client": ping_pulsar,
        "pika": ping_pika}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=500)
    ap.add_argument("--rate", type=float, default=200)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--drivers", default="confluent-kafka,pulsar-client,pika")
    args = ap.parse_args()
    with driver_brokers(args.drivers) as targets:
        for lib, broker, ep in targets:
            topic = f"ovh-{uuid.uuid4().hex[:8]}"
            j = job(broker, ep, lib, rate=args.rate, duration_s=args.seconds, topic=topic, interval_s=1,
                    kind="latency")
            prepare_job(j)
            bare = LogHistogram.from_values([(v + 500) // 1000 for v in PING[lib](ep, topic, args.messages)])
            out = os.path.join(tempfile.mkdtemp(prefix="bb-ovh-"), "w.jsonl")
            run_job(j, out, progress=lambda _s: None)
            w = LogHistogram()
            for line in open(out):
                r = json.loads(line)
                if r["record"] == "interval":
                    w.merge(LogHistogram.from_dict(r["e2e_latency_us"]))
            ms = lambda h, p: round(h.percentile(p) / 1000, 3)  # noqa: E731
            print(json.dumps({"driver": lib, "broker": broker, "implementation": ep.get("implementation"),
                              "bare_pingpong_p50_ms": ms(bare, 50), "bare_pingpong_p99_ms": ms(bare, 99),
                              "worker_e2e_p50_ms": ms(w, 50), "worker_e2e_p99_ms": ms(w, 99),
                              "overhead_p50_ms": round(ms(w, 50) - ms(bare, 50), 3),
                              "bare_messages": bare.count, "worker_messages": w.count,
                              "worker_rate_msg_s": args.rate}), flush=True)


if __name__ == "__main__":
    main()
