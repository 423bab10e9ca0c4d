"""One worker process running one phase (warm-up or measured) of a workload.

A *job* is a JSON-able dict (see :data:`JOB_FIELDS`) written by the
environment; the worker never needs Airflow. Flow:

1. connect: consumers first, then producers;
2. readiness probe (OMB): producers send probe messages (send time 0) until
   every subscription of every topic received one; bounded, with an error
   naming what never arrived;
3. load: every producer follows an open-loop uniform schedule
   ``intended_i = start + i / rate``; it sends at the intended time, or at
   once when it is late; the lateness is recorded as publish delay, so a
   client that cannot keep up shows it instead of quietly sending less;
4. intervals are written as they close; at the end producers flush, the
   consumers get a bounded time to drain, and the end record is written.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any, Callable

import psutil

from brokerbench import __version__
from brokerbench.worker.drivers import driver_class
from brokerbench.worker.payload import STAMP, key_iterator, payload_pool
from brokerbench.worker.recorder import IntervalWriter, Recorder

log = logging.getLogger("brokerbench.worker")

#: job field -> meaning (the environment writes these; see docs/results-format.md)
JOB_FIELDS = {
    "worker": "name of this process, unique in the run (<host>-<index>)",
    "phase": "warmup | measure",
    "workload_id": "workload file stem, used in result paths",
    "broker": "kafka | pulsar | rabbitmq",
    "variant": "durability variant name",
    "workload": "OMB workload dict",
    "driver": "OMB driver dict (variant already applied)",
    "endpoint": "BrokerEndpoint dict: where the broker listens",
    "topics": "topic names, created by `prepare`",
    "subscriptions": "subscription names (one per subscriptionsPerTopic)",
    "duration_s": "length of the phase, s",
    "interval_s": "reporting interval, s",
    "rate_msg_s": "this process's total target rate over all its producers, msg/s (0 = none)",
    "producers_per_topic": "producers this process runs per topic",
    "consumers_per_subscription": "consumers this process runs per subscription",
    "consumer_index_offset": "index of this process's first consumer within a subscription",
    "consumers_in_subscription": "consumers per subscription over all processes",
    "start_at_ns": "optional wall-clock start shared by all processes, ns",
    "probe_timeout_s": "bound of the readiness probe, s",
    "drain_timeout_s": "bound of the wait for consumers after the last send, s",
    "client_library": "optional: which library for the broker (default per broker)",
}


class WorkerError(RuntimeError):
    pass


def _producer_loop(producer, rate: float, start_ns: int, end_ns: int, pool: list[bytes],
                   keys, recorder: Recorder, errors: list[str]) -> None:
    """The open-loop send schedule of one producer. Hot path: keep it lean."""
    send = producer.send
    tns = time.time_ns
    sleep = time.sleep
    pack = STAMP.pack
    n = len(pool)
    period = 1e9 / rate
    i = 0
    try:
        while True:
            intended = start_ns + int(i * period)
            if intended >= end_ns:
                break
            now = tns()
            if now < intended:
                sleep((intended - now) * 1e-9)
                now = tns()
            recorder.s.delay_ns.append(now - intended)
            send(pack(now) + pool[i % n], next(keys), now)
            i += 1
    except Exception as e:  # the broker went away, or the library gave up
        errors.append(f"producer: {e}")
        recorder.error(e)


def run_job(job: dict[str, Any], out_path: str, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Run one phase; write the result file; return the end record's totals.

    Raises WorkerError after writing the file when the phase did not end well
    (every interval measured before the failure is kept in the file).
    """
    workload = job["workload"]
    broker = job["broker"]
    topics: list[str] = job["topics"]
    subscriptions: list[str] = job.get("subscriptions", [])
    partitions = int(workload.get("partitionsPerTopic", 1))
    producers_per_topic = int(job.get("producers_per_topic", 0))
    consumers_per_sub = int(job.get("consumers_per_subscription", 0))
    duration_s = float(job["duration_s"])
    rate = float(job.get("rate_msg_s", 0))
    n_producers = producers_per_topic * len(topics)

    recorder = Recorder()
    cls = driver_class(broker, job.get("client_library"))
    meta = {
        "format_version": 1,
        "workload": job["workload_id"], "workload_name": workload.get("name", job["workload_id"]),
        "driver": job["driver"].get("name", broker), "broker": broker, "variant": job["variant"],
        "phase": job["phase"], "worker": job["worker"], "host": socket.gethostname(),
        "interval_s": float(job.get("interval_s", 10)),
        "target_rate_msg_s": rate if n_producers else 0,
        "message_size_bytes": int(workload["messageSize"]),
        "topics": len(topics), "partitions_per_topic": partitions,
        "producers": n_producers, "consumers": consumers_per_sub * len(subscriptions) * len(topics),
        "subscriptions_per_topic": len(subscriptions),
        "client_library": cls.client_library, "client_library_version": cls.client_library_version,
        "brokerbench_version": __version__,
        "broker_implementation": job["endpoint"].get("implementation"),
        "broker_version": job["endpoint"].get("version"),
    }
    writer = IntervalWriter(out_path, meta, recorder,
                            subscriptions=len(subscriptions) if consumers_per_sub else 0, progress=progress)
    driver = None
    consumers, producers = [], []
    proc = psutil.Process()
    status, error = "ok", None
    try:
        driver = cls(job["endpoint"], job["driver"], recorder)
        # -- consumers, with a probe handler until the load starts ---------
        seen: dict[tuple[str, str], bool] = {}
        unpack = STAMP.unpack_from

        def probe_handler(topic: str, sub: str):
            def on_payload(b: bytes) -> None:
                if unpack(b)[0] == 0:
                    seen[(topic, sub)] = True
            return on_payload

        offset = int(job.get("consumer_index_offset", 0))
        total_in_sub = int(job.get("consumers_in_subscription", consumers_per_sub or 1))
        for t in topics:
            for s in subscriptions:
                for c in range(consumers_per_sub):
                    consumers.append(driver.create_consumer(
                        t, s, partitions, probe_handler(t, s), consumer_index=offset + c,
                        consumers_in_subscription=total_in_sub))
        for t in topics:
            for _ in range(producers_per_topic):
                producers.append(driver.create_producer(t, partitions))
        progress(f"[{job['worker']}] {job['phase']}: {len(producers)} producers at {rate:,.0f} msg/s in total, "
                 f"{len(consumers)} consumers, topics {', '.join(topics)}")

        # -- readiness probe ------------------------------------------------
        if producers and consumers:
            wanted = {(t, s) for t in topics for s in subscriptions}
            deadline = time.monotonic() + float(job.get("probe_timeout_s", 60))
            probe = STAMP.pack(0) + payload_pool(workload)[0]
            rounds = 0
            while not wanted <= set(seen):
                if time.monotonic() > deadline:
                    missing = ", ".join(f"subscription {s} of topic {t}" for t, s in sorted(wanted - set(seen)))
                    raise WorkerError(f"readiness probe: nothing arrived on {missing} "
                                      f"within {job.get('probe_timeout_s', 60)} s")
                for i, p in enumerate(producers):
                    p.send(probe, str(rounds * 31 + i).encode() if partitions > 1 else None, time.time_ns())
                rounds += 1
                time.sleep(0.5)
            progress(f"[{job['worker']}] ready: every subscription received a probe ({rounds} probe rounds)")

        # -- measured (or warm-up) load ------------------------------------
        tns = time.time_ns
        recorder_ref = recorder

        def on_payload(b: bytes) -> None:
            recorder_ref.s.e2e_ns.append(tns() - unpack(b)[0])

        for c in consumers:
            c.on_payload = on_payload
        pool = payload_pool(workload)
        start_ns = int(job.get("start_at_ns") or (time.time_ns() + 100_000_000))
        end_ns = start_ns + int(duration_s * 1e9)
        cpu0 = proc.cpu_times()
        wall0 = time.monotonic()
        writer.start(start_ns, duration_s)
        producer_errors: list[str] = []
        threads = [threading.Thread(target=_producer_loop, name=f"producer-{i}", daemon=True,
                                    args=(p, rate / len(producers), start_ns, end_ns, pool,
                                          key_iterator(workload.get("keyDistributor")), recorder,
                                          producer_errors))
                   for i, p in enumerate(producers)] if rate > 0 else []
        for th in threads:
            th.start()
        while time.time_ns() < end_ns and not producer_errors:
            time.sleep(min(0.2, max(0.0, (end_ns - time.time_ns()) / 1e9)))
        for th in threads:
            th.join(timeout=max(5.0, duration_s))
        for p in producers:
            p.flush(float(job.get("drain_timeout_s", 10)))
        # bounded wait for the consumers to catch up with what was acknowledged
        drain_deadline = time.monotonic() + float(job.get("drain_timeout_s", 10))
        while consumers and time.monotonic() < drain_deadline:
            acked = writer.totals["acked"] + len(recorder.s.publish_ns)
            received = writer.totals["received"] + len(recorder.s.e2e_ns)
            if received >= acked * len(subscriptions):
                break
            time.sleep(0.05)
        cpu1 = proc.cpu_times()
        cpu_percent = 100.0 * ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / max(
            time.monotonic() - wall0, 1e-9)
        if producer_errors:
            status, error = "error", producer_errors[0]
    except Exception as e:
        status, error = "error", f"{type(e).__name__}: {e}"
        cpu_percent = None
    finally:
        for c in consumers:
            _quietly(c.close)
        for p in producers:
            _quietly(p.close)
        if driver is not None:
            _quietly(driver.close)

    if writer._thread is None:  # failed before the load started: no interval to close
        writer._stop.set()
    writer.finish(status=status, error=error, cpu_percent=cpu_percent)
    t = writer.totals
    unacked = t["sent"] - t["acked"] - t["send_errors"]
    if status == "ok" and (t["send_errors"] or unacked > 0):
        error = (f"{t['send_errors']} sends failed and {max(unacked, 0)} were never acknowledged "
                 f"(last error: {recorder.last_error})")
        status = "error"
    progress(f"[{job['worker']}] {job['phase']} done: sent {t['sent']} acked {t['acked']} "
             f"received {t['received']} errors {t['send_errors']} cpu {cpu_percent or 0:.0f}% status {status}")
    if status != "ok":
        raise WorkerError(f"worker {job['worker']} ({broker} at {_where(job['endpoint'])}): {error}")
    return t


def prepare_job(job: dict[str, Any]) -> None:
    """Create the job's topics and subscriptions on the broker."""
    cls = driver_class(job["broker"], job.get("client_library"))
    driver = cls(job["endpoint"], job["driver"], Recorder())
    try:
        driver.prepare(job["topics"], int(job["workload"].get("partitionsPerTopic", 1)),
                       job.get("subscriptions", []))
    finally:
        driver.close()


def _where(endpoint: dict[str, Any]) -> str:
    return (endpoint.get("bootstrap_servers") or endpoint.get("service_url")
            or ",".join(endpoint.get("amqp_uris") or []) or "?")


def _quietly(fn) -> None:
    try:
        fn()
    except Exception as e:
        log.debug("close: %s", e)
