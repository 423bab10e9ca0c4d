"""Harness ceiling: msg/s of one worker process with full measurement vs the library's bare send loop.

For each driver, against its local broker (started here, loopback), in one run:

- bare:    the client library's own send loop: no timestamps, no histograms,
           no per-message Python callback unless the library requires one
           (pulsar-client's send_async does; pika counts confirms);
- harness: brokerbench's worker, producer-only and unthrottled: the 8-byte
           send stamp, publish delay and publish latency per message,
           per-interval histograms, progress lines.

Both send 100-byte messages for the same time to a fresh topic; the rate is
acknowledged messages / (send time + final flush). Rounds alternate (bare,
harness, bare, harness...) and the best of each is kept, so background load
on a shared machine hits both alike. Prints one JSON line per driver:
{"driver", "bare_msg_s", "harness_msg_s", "ratio", "rounds": [...]}.

    .venv/bin/python bench/harness_ceiling.py [--seconds 5] [--rounds 2] [--drivers a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid

from _common import DEFAULT_DRIVERS, DRIVER_CONFIG, driver_brokers, job, pulsar_producer

from brokerbench.worker.drivers.base import parse_properties
from brokerbench.worker.runner import prepare_job, run_job

SIZE = 100


def _kafka_kwargs():
    from brokerbench.worker.drivers.kafka_python import _PRODUCER_KEYS, _kwargs
    return _kwargs(parse_properties(DRIVER_CONFIG["kafka"]["producerConfig"]), _PRODUCER_KEYS)


def bare_kafka_python(ep, topic, seconds):
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=ep["bootstrap_servers"], **_kafka_kwargs())
    payload = os.urandom(SIZE)
    send = p.send
    n = 0
    t0 = time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        for _ in range(256):
            send(topic, value=payload)
        n += 256
    p.flush(60)
    el = time.monotonic() - t0
    p.close(5)
    return n / el


def bare_confluent(ep, topic, seconds):
    from confluent_kafka import Producer
    conf = {"bootstrap.servers": ep["bootstrap_servers"], **parse_properties(DRIVER_CONFIG["kafka"]["producerConfig"])}
    p = Producer(conf)
    payload = os.urandom(SIZE)
    produce, poll = p.produce, p.poll
    n = 0
    t0 = time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        for _ in range(1000):
            try:
                produce(topic, payload)
            except BufferError:  # queue full: serve deliveries until it fits (as the worker does)
                while True:
                    poll(0.005)
                    try:
                        produce(topic, payload)
                        break
                    except BufferError:
                        pass
        n += 1000
        poll(0)
    if p.flush(60):
        raise RuntimeError("confluent bare loop: messages left unacknowledged")
    return n / (time.monotonic() - t0)


def bare_pulsar(ep, topic, seconds):
    c, p = pulsar_producer(ep, topic)
    payload = os.urandom(SIZE)
    send = p.send_async
    noop = lambda _res, _mid: None  # noqa: E731  (pulsar-client requires a callback)
    n = 0
    t0 = time.monotonic()
    end = t0 + seconds
    while time.monotonic() < end:
        for _ in range(256):
            send(payload, noop)
        n += 256
    p.flush()
    el = time.monotonic() - t0
    c.close()
    return n / el


def bare_pika(ep, topic, seconds):
    """One thread: a SelectConnection with publisher confirms, publishing in batches
    while fewer than 10,000 messages await their confirm (the worker's bound)."""
    import pika
    uri = ep["amqp_uris"][0]
    payload = os.urandom(SIZE)
    props = pika.BasicProperties(delivery_mode=1)
    st = {"sent": 0, "confirmed": 0, "t0": None, "done": None}
    conn = None

    def on_confirm(frame):
        m = frame.method
        st["confirmed"] = m.delivery_tag if m.multiple else max(st["confirmed"], m.delivery_tag)
        if st["done"] is None and time.monotonic() >= st["end"] and st["confirmed"] >= st["sent"]:
            st["done"] = time.monotonic()
            conn.close()

    def publish(ch):
        if time.monotonic() < st["end"]:
            k = min(1000, 10000 - (st["sent"] - st["confirmed"]))
            for i in range(max(0, k)):
                st["sent"] += 1
                ch.basic_publish(topic, str(st["sent"] % 1), payload, props)
            conn.ioloop.call_later(0 if k > 0 else 0.0002, lambda: publish(ch))

    def on_channel(ch):
        def ready(_f):
            st["t0"] = time.monotonic()
            st["end"] = st["t0"] + seconds
            publish(ch)
        ch.confirm_delivery(on_confirm, callback=ready)

    conn = pika.SelectConnection(pika.URLParameters(uri),
                                 on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
                                 on_close_callback=lambda c, _r: c.ioloop.stop())
    conn.ioloop.start()
    return st["sent"] / ((st["done"] or time.monotonic()) - st["t0"])


BARE = {"kafka-python": bare_kafka_python, "confluent-kafka": bare_confluent,
        "pulsar-client": bare_pulsar, "pika": bare_pika}


def harness(broker, ep, lib, topic, seconds):
    j = job(broker, ep, lib, rate=0, duration_s=seconds, kind="producer-only", consumers=0, subscriptions=0,
            interval_s=max(1.0, seconds / 5), topic=topic)
    out = os.path.join(tempfile.mkdtemp(prefix="bb-harness-"), "w.jsonl")
    res = run_job(j, out, progress=lambda _s: None)
    return res["acked"] / (res["load_s"] + res.get("flush_s", 0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--drivers", default=",".join(DEFAULT_DRIVERS))
    args = ap.parse_args()
    with driver_brokers(args.drivers) as targets:
        for lib, broker, ep in targets:
            topic = f"ceiling-{uuid.uuid4().hex[:8]}"
            prepare_job(job(broker, ep, lib, rate=0, duration_s=1, topic=topic))
            rounds = []
            for _ in range(args.rounds):
                # the JVM engine's library has no bare loop here (pulsar-perf is its bare loop: bench/crosscheck.py)
                b = BARE[lib](ep, topic, args.seconds) if lib in BARE else None
                h = harness(broker, ep, lib, topic, args.seconds)
                rounds.append({"bare_msg_s": None if b is None else round(b), "harness_msg_s": round(h)})
            bare = max((r["bare_msg_s"] for r in rounds if r["bare_msg_s"] is not None), default=None)
            har = max(r["harness_msg_s"] for r in rounds)
            print(json.dumps({"driver": lib, "broker": broker, "implementation": ep.get("implementation"),
                              "bare_msg_s": bare, "harness_msg_s": har, "ratio": round(har / bare, 3) if bare else None,
                              "seconds": args.seconds, "rounds": rounds}), flush=True)


if __name__ == "__main__":
    main()
