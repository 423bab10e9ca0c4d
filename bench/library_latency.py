"""Publish latency of the client library's bare paced loop against brokerbench's worker, at the same fixed rate.

The cross-check (bench/crosscheck.py, docs/benchmarks-harness.md section 5) puts brokerbench's publish latency
beside the vendor tools'. Where the two differ, this benchmark says whose the difference is: the client
library's, or the harness's. For each driver, against its local broker (started here, loopback), with the
cross-check's settings (bench/_common.py DRIVER_CONFIG: acks=1, linger.ms=1, batch.size=131072 for Kafka;
batching with a 1 ms window for Pulsar; confirms for RabbitMQ), one producer, no consumer:

- bare:   the library's own send call on the same open-loop schedule (send i at start + i / rate, at once when
          late), a monotonic timestamp before the call, and the library's acknowledgement callback appending
          now - timestamp to a list (confluent-kafka: ``Message.latency()``, librdkafka's own figure, as the
          worker reads it; pika: its asynchronous connection with publisher confirms, the I/O loop's own timer
          publishing on the schedule, on one thread). Percentiles are exact, from the raw samples;
          ``bare_sent_msg_s`` is the rate of sends the loop achieved (below the rate when it fell behind).
- worker: brokerbench's worker, producer-only, the same rate, size and seconds (its histograms: 1 % relative
          precision).

Each side first runs ``--warmup`` seconds that are not measured (a warm-up phase for the worker). Rounds
alternate (bare, worker, bare, worker) and each side keeps its round with the lowest p50 (background load on a
shared machine only adds latency). Prints one JSON line per driver x rate x size, latencies in ms:

    {"driver": "kafka-python", "rate_msg_s": 1000, "size_B": 100, "bare_p50_ms": 2.2, "worker_p50_ms": 2.3,
     "ratio_p50": 1.04, "bare_p99_ms": ..., "worker_p99_ms": ..., "ratio_p99": ..., "rounds": [...]}

    .venv/bin/python bench/library_latency.py [--drivers kafka-python,pika] [--rates 1000,10000] \\
        [--sizes 100,1024] [--seconds 5] [--warmup 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from typing import Callable

import numpy as np
from _common import DRIVER_CONFIG, driver_brokers, job, pulsar_producer

from brokerbench.histogram import LogHistogram
from brokerbench.worker.drivers.base import parse_properties
from brokerbench.worker.runner import prepare_job, run_job


def paced(send_one: Callable[[], None], rate: float, seconds: float,
          idle: Callable[[float], None] = time.sleep) -> float:
    """Call send_one on the open-loop schedule start + i / rate for ``seconds``; the rate of sends achieved
    (msg/s; below ``rate`` when the loop fell behind its schedule)."""
    n = int(rate * seconds)
    t0 = time.monotonic()
    for i in range(n):
        wait = t0 + i / rate - time.monotonic()
        if wait > 0:
            idle(wait)
        send_one()
    return (n - 1) / max(time.monotonic() - t0, 1e-9)  # n sends, n - 1 schedule steps apart


def bare_kafka_python(ep, topic, size, rate, seconds, warmup):
    from kafka import KafkaProducer

    from brokerbench.worker.drivers.kafka_python import _PRODUCER_KEYS, _kwargs
    p = KafkaProducer(bootstrap_servers=ep["bootstrap_servers"],
                      **_kwargs(parse_properties(DRIVER_CONFIG["kafka"]["producerConfig"]), _PRODUCER_KEYS))
    payload = os.urandom(size)
    lat: list[int] = []
    clock = time.monotonic_ns

    def one():
        t = clock()
        p.send(topic, value=payload).add_callback(lambda _md, t=t: lat.append(clock() - t))

    paced(one, rate, warmup)
    p.flush(30)
    lat.clear()
    achieved = paced(one, rate, seconds)
    p.flush(30)
    p.close(5)
    return lat, achieved


def bare_confluent(ep, topic, size, rate, seconds, warmup):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": ep["bootstrap_servers"], "socket.nagle.disable": True,
                  **parse_properties(DRIVER_CONFIG["kafka"]["producerConfig"])})
    payload = os.urandom(size)
    lat: list[int] = []

    def report(err, msg):
        if err is None:
            lat.append(int(msg.latency() * 1e9))

    def idle(s):  # as the worker: serve delivery reports, then sleep
        p.poll(0)
        time.sleep(s)

    paced(lambda: p.produce(topic, payload, on_delivery=report), rate, warmup, idle)
    p.flush(30)
    lat.clear()
    achieved = paced(lambda: p.produce(topic, payload, on_delivery=report), rate, seconds, idle)
    p.flush(30)
    return lat, achieved


def bare_pulsar(ep, topic, size, rate, seconds, warmup):
    c, p = pulsar_producer(ep, topic)
    payload = os.urandom(size)
    lat: list[int] = []
    clock = time.monotonic_ns

    def one():
        t = clock()
        p.send_async(payload, lambda _res, _mid, t=t: lat.append(clock() - t))

    paced(one, rate, warmup)
    p.flush()
    lat.clear()
    achieved = paced(one, rate, seconds)
    p.flush()
    c.close()
    return lat, achieved


def bare_pika(ep, topic, size, rate, seconds, warmup):
    """pika's asynchronous connection on one thread: the I/O loop itself publishes on the schedule (a timer),
    publisher confirms time each message (delivery tag -> send time, as the worker's producer)."""
    import pika
    queue = f"{topic}-bare"
    payload = os.urandom(size)
    props = pika.BasicProperties(delivery_mode=1)
    clock = time.monotonic_ns
    lat: list[int] = []
    pending: dict[int, int] = {}
    warm_n, total = int(rate * warmup), int(rate * (warmup + seconds))
    st = {"sent": 0, "lowest": 1, "t0": 0.0, "first": 0.0, "last": 0.0}

    def on_confirm(frame):
        now, m = clock(), frame.method
        for t in (range(st["lowest"], m.delivery_tag + 1) if m.multiple else (m.delivery_tag,)):
            ns = pending.pop(t, None)
            if ns is not None and t > warm_n:
                lat.append(now - ns)
        while st["lowest"] <= st["sent"] and st["lowest"] not in pending:
            st["lowest"] += 1
        if st["sent"] >= total and not pending:
            conn.close()

    def tick(ch):
        while st["sent"] < total and st["t0"] + st["sent"] / rate <= time.monotonic():
            st["sent"] += 1
            if st["sent"] == warm_n + 1:
                st["first"] = time.monotonic()
            pending[st["sent"]] = clock()
            ch.basic_publish("", queue, payload, props)
        st["last"] = time.monotonic()
        if st["sent"] < total:
            conn.ioloop.call_later(max(0.0, st["t0"] + st["sent"] / rate - time.monotonic()), lambda: tick(ch))

    def start(ch):
        st["t0"] = time.monotonic()
        tick(ch)

    def on_channel(ch):
        ch.queue_declare(queue, auto_delete=True,
                         callback=lambda _f: ch.confirm_delivery(on_confirm, callback=lambda _f2: start(ch)))

    conn = pika.SelectConnection(pika.URLParameters(ep["amqp_uris"][0]),
                                 on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                                 on_close_callback=lambda c, _r: c.ioloop.stop())
    conn.ioloop.start()
    n = total - warm_n
    return lat, (n - 1) / max(st["last"] - st["first"], 1e-9)


BARE = {"kafka-python": bare_kafka_python, "confluent-kafka": bare_confluent,
        "pulsar-client": bare_pulsar, "pika": bare_pika}


def worker(broker, ep, lib, topic, size, rate, seconds, warmup) -> LogHistogram:
    work = tempfile.mkdtemp(prefix="bb-liblat-")
    h = LogHistogram()
    for phase, s in (("warmup", warmup), ("measure", seconds)):
        j = job(broker, ep, lib, rate=rate, duration_s=s, kind="producer-only", consumers=0, subscriptions=0,
                message_size=size, interval_s=max(1.0, s / 5), topic=topic).with_(phase=phase)
        out = os.path.join(work, f"{phase}.jsonl")
        run_job(j, out, progress=lambda _s: None)
        if phase == "measure":
            with open(out) as fh:
                for line in fh:
                    r = json.loads(line)
                    if r["record"] == "interval":
                        h.merge(LogHistogram.from_dict(r["publish_latency_us"]))
    return h


def _ms(x: float) -> float:
    return round(x / 1e3, 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--drivers", default="kafka-python,confluent-kafka,pulsar-client,pika")
    ap.add_argument("--rates", default="1000,10000")
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    rates = [float(r) for r in args.rates.split(",") if r]
    sizes = [int(s) for s in args.sizes.split(",") if s]
    with driver_brokers(args.drivers) as targets:
        for lib, broker, ep in targets:
            for rate in rates:
                for size in sizes:
                    topic = f"liblat-{uuid.uuid4().hex[:8]}"
                    prepare_job(job(broker, ep, lib, rate=rate, duration_s=1, topic=topic))
                    rounds = []
                    for _ in range(args.rounds):
                        samples, achieved = BARE[lib](ep, topic, size, rate, args.seconds, args.warmup)
                        raw = np.asarray(samples, np.int64)
                        bare = {"p50": float(np.percentile(raw, 50)) / 1e3, "p99": float(np.percentile(raw, 99)) / 1e3,
                                "n": int(raw.size)}  # µs
                        w = worker(broker, ep, lib, topic, size, rate, args.seconds, args.warmup)
                        rounds.append({"bare_p50_ms": _ms(bare["p50"]), "bare_p99_ms": _ms(bare["p99"]),
                                       "bare_samples": bare["n"], "bare_sent_msg_s": round(achieved),
                                       "worker_p50_ms": _ms(w.percentile(50)),
                                       "worker_p99_ms": _ms(w.percentile(99)), "worker_samples": w.count})
                    b = min(rounds, key=lambda r: r["bare_p50_ms"])
                    wk = min(rounds, key=lambda r: r["worker_p50_ms"])
                    print(json.dumps({
                        "driver": lib, "broker": broker, "implementation": ep.get("implementation"),
                        "version": ep.get("version"), "rate_msg_s": rate, "size_B": size,
                        "bare_p50_ms": b["bare_p50_ms"], "worker_p50_ms": wk["worker_p50_ms"],
                        "ratio_p50": round(wk["worker_p50_ms"] / b["bare_p50_ms"], 3) if b["bare_p50_ms"] else None,
                        "bare_p99_ms": b["bare_p99_ms"], "worker_p99_ms": wk["worker_p99_ms"],
                        "ratio_p99": round(wk["worker_p99_ms"] / b["bare_p99_ms"], 3) if b["bare_p99_ms"] else None,
                        "seconds": args.seconds, "warmup_s": args.warmup, "rounds": rounds}), flush=True)


if __name__ == "__main__":
    main()
