"""One worker process running one phase (warm-up or measured) of a workload.

A *job* is a JSON-able dict (schema: :class:`brokerbench.worker.job.Job`) written by the
environment; the worker never needs Airflow. Flow:

1. connect: consumers first, then producers;
2. readiness probe (OMB): producers send probe messages (send time 0) until
   every subscription of every topic received one and every consumer is in
   place (a Kafka group member holds its partitions at fixed positions);
   bounded, with an error naming what never arrived;
3. load: every producer follows an open-loop uniform schedule
   ``intended_i = start + i / rate``; it sends at the intended time, or at
   once when it is late; the lateness is recorded as publish delay, so a
   client that cannot keep up shows it instead of quietly sending less;
4. intervals are written as they close; at the end producers flush, the
   consumers get a bounded time to drain, and the end record is written.
"""

from __future__ import annotations

import logging
import math
import socket
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, Callable

import psutil

from brokerbench import __version__
from brokerbench.faults import OUTAGE_MIN_SENT
from brokerbench.worker.drivers import driver_class
from brokerbench.worker.job import DELAY_P99_BOUND_MS, Job, JobError, JobWorkload
from brokerbench.worker.job import JOB_FIELDS as JOB_FIELDS  # re-exported
from brokerbench.worker.job import KINDS as KINDS  # re-exported
from brokerbench.worker.payload import STAMP, key_iterator, payload_pool
from brokerbench.worker.recorder import IntervalWriter, Recorder

log = logging.getLogger("brokerbench.worker")


#: Target rates (msg/s, per worker process) of a throughput sweep when the job names none:
#: Confluent's fixed steps (10K ... 1M) with lower steps for Python clients.
SWEEP_RATES = [1_000, 5_000, 10_000, 20_000, 35_000, 50_000, 75_000, 100_000, 200_000, 500_000, 1_000_000]

#: Validity thresholds (documented in docs/worker.md).
ACHIEVED_MIN_RATIO = 0.99
CLIENT_CPU_BOUND_PERCENT = 85.0  # one Python process runs on about one core (the GIL)
CLOCK_OFFSET_WARN_MS = 1.0
HOST_CPU_BOUND_PERCENT = 90.0


def workload_kind(workload: JobWorkload | Mapping[str, Any], kind: str | None = None) -> str:
    """The workload kind (:meth:`JobWorkload.kind_of`) of a workload or its OMB dict."""
    return JobWorkload.parse(workload).kind_of(kind)


class WorkerError(RuntimeError):
    pass


def _producer_loop(producer, rate: float, start_ns: int, end_ns: int, pool: list[bytes],
                   keys, recorder: Recorder, errors: list[str], stop: threading.Event) -> None:
    """The open-loop send schedule of one producer. Hot path: keep it lean.

    Per message: the intended time, one clock read, one append (publish
    delay), the 8-byte stamp, the library call. ``rate`` = inf is
    unthrottled: every send is "on time" (delay 0). ``stop`` is checked once
    per 256 messages and whenever the producer waits.
    """
    fast = producer.fast_send
    send = producer.send
    idle = producer.idle
    tns = time.time_ns
    pack = STAMP.pack
    n = len(pool)
    block = range(256)
    unthrottled = math.isinf(rate)
    period = 0.0 if unthrottled else 1e9 / rate
    i = 0
    try:
        while not stop.is_set():
            for _ in block:
                now = tns()
                if unthrottled:
                    if now >= end_ns:
                        return
                    intended = now
                else:
                    intended = start_ns + int(i * period)
                    if intended >= end_ns:
                        return
                    if now < intended:
                        if stop.is_set():
                            return
                        idle((intended - now) * 1e-9)
                        now = tns()
                recorder.s.delay_ns.append(now - intended)
                if fast is None:
                    send(pack(now) + pool[i % n], next(keys), now)
                else:
                    fast(pack(now) + pool[i % n], next(keys))
                i += 1
    except Exception as e:  # the broker went away, or the library gave up
        errors.append(f"producer: {type(e).__name__}: {e}")
        recorder.error(e)


class _Phase:
    """One worker process running one phase of one workload (see the module docstring)."""

    def __init__(self, job: Job, out_path: str, progress: Callable[[str], None]):
        self.job = job
        self.progress = progress
        self.workload = job.workload
        self.kind = self.workload.kind_of(job.kind)
        if self.workload.message_size is None:
            raise JobError("workload.messageSize: a phase needs it")
        self.message_size: int = self.workload.message_size
        self.topics: list[str] = job.topics
        self.partitions = self.workload.partitions_per_topic
        self.duration_s = float(job.duration_s)
        self.interval_s = float(job.interval_s)
        self.rate = float(job.rate_msg_s)
        self._lay_out_clients()
        if self.kind == "throughput-sweep":
            self.sweep_rates = [float(r) for r in (job.sweep_rates_msg_s or SWEEP_RATES)]
        self.recorder = Recorder()
        self.cls = driver_class(job.broker, job.client_library)
        self.load_s = 0.0
        self.errors: list[str] = []
        self.extra_end: dict[str, Any] = {}
        self.reasons: list[str] = []
        self.undrained = 0  # acknowledged messages its subscriptions had not received when the drain ended
        meta = self._meta()
        self.writer = IntervalWriter(out_path, meta, self.recorder, subscriptions=len(self.subs),
                                     progress=progress)
        self.writer.catchup = self.catchup_sub is not None
        self.consumers: list = []
        self.catchup_consumers: list = []
        self.producers: list = []
        self.driver: Any = None

    def _lay_out_clients(self) -> None:
        """Producers and consumers per topic, the subscriptions, and the catch-up one of a mixed workload."""
        job = self.job
        subs = list(job.subscriptions)
        ppt, cps = job.producers_per_topic, job.consumers_per_subscription
        if self.kind == "consumer-only":
            ppt = 0
        if self.kind == "producer-only":
            cps = 0
            if self.rate <= 0:
                self.rate = math.inf  # unthrottled
        self.catchup_sub: str | None = None
        if self.kind == "mixed":
            if len(subs) < 2:
                raise WorkerError("a mixed workload needs subscriptionsPerTopic >= 2: "
                                  "tailing subscriptions plus the last one, which catches up")
            self.catchup_sub = f"{subs[-1]}-catchup-{job.phase}"
            subs = subs[:-1]
        self.subs = subs if cps else []
        self.ppt, self.cps = ppt, cps
        self.n_producers = ppt * len(self.topics)

    def _meta(self) -> dict[str, Any]:
        """The result file's meta record: what ran, where, against which broker."""
        job = self.job
        target = (0 if not self.n_producers else
                  max(self.sweep_rates) if self.kind == "throughput-sweep" else
                  None if math.isinf(self.rate) else self.rate)
        subscriptions = len(self.subs) + (1 if self.catchup_sub else 0)
        meta = {
            "format_version": 1, "kind": self.kind,
            "workload": job.workload_id, "workload_name": self.workload.name or job.workload_id,
            "driver": job.driver.name or job.broker, "broker": job.broker,
            "variant": job.variant, "phase": job.phase, "worker": job.worker,
            "host": socket.gethostname(), "interval_s": self.interval_s,
            "target_rate_msg_s": target,
            "message_size_bytes": self.message_size,
            "topics": len(self.topics), "partitions_per_topic": self.partitions,
            "producers": self.n_producers,
            "consumers": self.cps * subscriptions * len(self.topics),
            "subscriptions_per_topic": subscriptions,
            "client_library": self.cls.client_library, "client_library_version": self.cls.client_library_version,
            "brokerbench_version": __version__,
            "broker_implementation": job.endpoint.implementation,
            "broker_version": job.endpoint.version,
            "start_at_ns": job.start_at_ns,
        }
        if self.kind == "throughput-sweep":
            meta["sweep_rates_msg_s"] = self.sweep_rates
        return meta

    # -- helpers -----------------------------------------------------------------
    def say(self, text: str) -> None:
        self.progress(f"[{self.job.worker}] {text}")

    def backlog(self) -> int:
        _, acked, received = self.writer.live()
        return max(0, acked * len(self.subs) - received) if self.subs else 0

    def start_producers(self, rate: float, start_ns: int, end_ns: int, stop: threading.Event):
        pool = payload_pool(self.workload)
        per = rate / len(self.producers)
        threads = [threading.Thread(target=_producer_loop, name=f"producer-{i}", daemon=True,
                                    args=(p, per, start_ns, end_ns, pool,
                                          key_iterator(self.workload.key_distributor), self.recorder,
                                          self.errors, stop))
                   for i, p in enumerate(self.producers)]
        for th in threads:
            th.start()
        return threads

    def wait_until(self, end_ns: int, stop: threading.Event | None = None,
                   until: Callable[[], bool] | None = None) -> None:
        while time.time_ns() < end_ns and not self.errors and not (stop is not None and stop.is_set()):
            if until is not None and until():
                return
            time.sleep(min(0.1, max(0.0, (end_ns - time.time_ns()) / 1e9)))

    def flush_and_drain(self) -> None:
        timeout = self.job.drain_timeout_s
        t0 = time.monotonic()
        for p in self.producers:
            p.flush(timeout)
        self.extra_end["flush_s"] = round(self.extra_end.get("flush_s", 0) + time.monotonic() - t0, 4)
        deadline = time.monotonic() + timeout
        while self.consumers and time.monotonic() < deadline and not self.errors:
            if self.backlog() == 0:
                time.sleep(0.2)  # a late probe counted as received may hide one message
                break
            time.sleep(0.05)
        if self.consumers and self.owns_subscriptions():
            self.undrained = self.backlog()

    def owns_subscriptions(self) -> bool:
        """Every consumer of this process's subscriptions is in this process: what it acknowledged is what its
        subscriptions must receive (with consumers of one subscription in several processes, one process's
        acknowledgements are read by others)."""
        return (self.job.consumers_in_subscription or self.cps) <= self.cps

    # -- set-up ----------------------------------------------------------------------
    def connect(self) -> None:
        job = self.job
        self.driver = self.cls(job.endpoint, job.driver, self.recorder)
        self.seen: set[tuple[str, str]] = set()
        unpack = STAMP.unpack_from
        seen = self.seen

        def probe_handler(topic: str, sub: str):
            def on_payload(b: bytes) -> None:
                if unpack(b)[0] == 0:
                    seen.add((topic, sub))
            return on_payload

        offset = job.consumer_index_offset
        total_in_sub = job.consumers_in_subscription or self.cps or 1
        start = "earliest" if self.kind == "consumer-only" else "latest"
        paused = False  # backlog: consumers take part in the probe, then pause
        for t in self.topics:
            for s in self.subs:
                for c in range(self.cps):
                    self.consumers.append(self.driver.create_consumer(
                        t, s, self.partitions, probe_handler(t, s), consumer_index=offset + c,
                        consumers_in_subscription=total_in_sub, start=start, paused=paused))
            if self.catchup_sub:
                for c in range(self.cps):
                    self.catchup_consumers.append(self.driver.create_consumer(
                        t, self.catchup_sub, self.partitions, lambda _b: None, consumer_index=offset + c,
                        consumers_in_subscription=total_in_sub, start="earliest", paused=True))
        for t in self.topics:
            for _ in range(self.ppt):
                self.producers.append(self.driver.create_producer(t, self.partitions))
        rate = ("unthrottled" if math.isinf(self.rate) else f"{self.rate:,.0f} msg/s") \
            if self.kind != "throughput-sweep" else f"a sweep over {len(self.sweep_rates)} rates"
        self.say(f"{self.job.phase} ({self.kind}): {len(self.producers)} producers at {rate} in total, "
                 f"{len(self.consumers) + len(self.catchup_consumers)} consumers, topics {', '.join(self.topics)}")

    def probe(self) -> None:
        """OMB's readiness check: a probe per producer until every subscription received one (bounded)."""
        if not self.producers:
            return
        timeout = self.job.probe_timeout_s
        deadline = time.monotonic() + timeout
        probe = STAMP.pack(0) + payload_pool(self.workload)[0]
        rounds = 0
        wanted = {(t, s) for t in self.topics for s in self.subs}
        target_acks = len(self.producers)  # at least one acknowledged probe per producer
        while True:
            acked = self.writer.live()[1]
            # every consumer too: a Kafka subscription's first member receives the probe while the others are
            # still joining, and their rebalance under load would skip messages (Consumer.ready)
            joining = sum(not c.ready() for c in self.consumers)
            if wanted <= self.seen and acked >= target_acks and not joining:
                break
            if self.errors or self.recorder.s.send_errors:
                raise WorkerError(f"readiness probe: sending failed: {self.recorder.last_error or self.errors}")
            if time.monotonic() > deadline:
                missing = [f"subscription {s} of topic {t}" for t, s in sorted(wanted - self.seen)]
                if acked < target_acks:
                    missing.append(f"an acknowledgement for {target_acks - acked} of {target_acks} producers")
                problems = [f"nothing arrived on {', '.join(missing)}"] if missing else []
                if joining:
                    problems.append(f"{joining} of {len(self.consumers)} consumers still joining their "
                                    "subscription (no partitions assigned)")
                raise WorkerError(f"readiness probe: {'; '.join(problems)} within {timeout:g} s")
            if rounds == 0 or not wanted <= self.seen:
                for i, p in enumerate(self.producers):
                    p.send(probe, str(rounds * 31 + i).encode() if self.partitions > 1 else None, time.time_ns())
                    p.flush(1.0)
            rounds += 1
            time.sleep(0.3)
        self.say(f"ready: every subscription received a probe, every producer an acknowledgement, every consumer "
                 f"its place ({rounds} probe rounds, {time.monotonic() - deadline + timeout:.1f} s)")

    def start_ns(self) -> int:
        at = self.job.start_at_ns
        now = time.time_ns()
        if at:
            if int(at) < now:
                late_ms = (now - int(at)) / 1e6
                self.extra_end["start_missed_ms"] = round(late_ms, 1)
                self.reasons.append(f"missed the agreed start by {late_ms:.0f} ms (set-up or probe took longer)")
                return now + 50_000_000
            return int(at)
        return now + 100_000_000

    def measuring_handler(self) -> None:
        tns = time.time_ns
        unpack = STAMP.unpack_from
        rec = self.recorder

        def on_payload(b: bytes) -> None:
            rec.s.e2e_ns.append(tns() - unpack(b)[0])

        def on_catchup(b: bytes) -> None:
            rec.s.catchup_e2e_ns.append(tns() - unpack(b)[0])

        for c in self.consumers:
            c.on_payload = on_payload
        for c in self.catchup_consumers:
            c.on_payload = on_catchup

    # -- the kinds ------------------------------------------------------------------------
    def run_constant(self) -> None:
        """latency, producer-only, mixed: the schedule for duration_s, then flush and drain."""
        start = self.start_ns()
        end = start + int(self.duration_s * 1e9)
        self.writer.start(start, self.duration_s)
        stop = threading.Event()
        threads = self.start_producers(self.rate, start, end, stop) if self.producers and self.rate > 0 else []
        if self.catchup_consumers:
            catchup_s = self.job.catchup_start_s
            at = start + int(float(self.duration_s / 3 if catchup_s is None else catchup_s) * 1e9)
            self.wait_until(at)
            for c in self.catchup_consumers:
                c.resume()
            self.say("catch-up subscription started reading from the beginning")
        self.wait_until(end)
        stop.set()
        for th in threads:
            th.join(timeout=max(5.0, self.duration_s))
        self.load_s = max(1e-9, (min(time.time_ns(), end) - start) / 1e9)
        self.flush_and_drain()

    def run_consumer_only(self) -> None:
        start = self.start_ns()
        end = start + int(self.duration_s * 1e9)
        self.writer.start(start, self.duration_s)
        idle_s = self.job.consumer_idle_s
        last = [0, time.monotonic()]

        def idle() -> bool:
            received = self.writer.live()[2]
            if received != last[0]:
                last[0], last[1] = received, time.monotonic()
                return False
            return received > 0 and time.monotonic() - last[1] > idle_s

        self.wait_until(end, until=idle)
        self.load_s = max(1e-9, (time.time_ns() - start) / 1e9)
        self.extra_end["consumer_only"] = {"received": self.writer.live()[2],
                                           "ended_by": "idle" if time.time_ns() < end else "duration"}

    def run_backlog(self) -> None:
        """Build consumerBacklogSizeGB with consumers paused, then drain to backlogDrainRatio (bounded)."""
        size = self.message_size
        requested = float(self.workload.consumer_backlog_size_gb or 0) * 1024 ** 3
        capacity = requested / size  # messages (per subscription)
        # drained: at most (1 - backlogDrainRatio) of the requested backlog is left,
        # plus what is in flight while producers keep sending (their rate x 100 ms)
        empty_level = (1.0 - self.workload.backlog_drain_ratio) * capacity + self.rate * 0.1
        for c in self.consumers:  # they joined and found their position during the probe
            c.pause()
        time.sleep(0.3)
        start = self.start_ns()
        end = start + int(self.duration_s * 1e9)
        self.writer.start(start, self.duration_s)
        stop = threading.Event()
        threads = self.start_producers(self.rate, start, end, stop)
        per_sub = lambda: self.backlog() / max(1, len(self.subs))  # noqa: E731
        self.wait_until(end, until=lambda: per_sub() >= capacity)
        built = per_sub() >= capacity
        t_built = time.time_ns()
        peak = self.backlog()
        info = {"requested_bytes": int(requested), "built": built, "build_s": round((t_built - start) / 1e9, 3),
                "peak_backlog_msgs": peak, "drain_ratio": self.workload.backlog_drain_ratio}
        self.say(f"backlog {'built' if built else 'NOT built'}: {peak} messages; consumers resume")
        for c in self.consumers:
            c.resume()
        self.wait_until(end, until=lambda: per_sub() <= empty_level)
        drained = per_sub() <= empty_level
        info.update(drained=drained, drain_s=round((time.time_ns() - t_built) / 1e9, 3),
                    backlog_at_end_msgs=self.backlog())
        stop.set()
        for th in threads:
            th.join(timeout=10)
        self.load_s = max(1e-9, (time.time_ns() - start) / 1e9)
        if not built:
            self.reasons.append(f"backlog of {requested / 1e9:.2f} GB not built within {self.duration_s:g} s")
        elif not drained:
            self.reasons.append(f"backlog not drained to {info['drain_ratio']:g} within {self.duration_s:g} s")
        self.extra_end["backlog"] = info
        self.flush_and_drain()

    def run_sweep(self) -> None:
        job = self.job
        rates = self.sweep_rates
        step_s = float(job.step_duration_s or max(self.interval_s, self.duration_s / len(rates)))
        bound_ms = job.sweep_max_delay_p99_ms
        stop_after = job.sweep_stop_after_unstable
        steps, unstable, highest = [], 0, None
        for k, r in enumerate(rates):
            self.writer.extra = {"step": k, "step_target_rate_msg_s": r}
            start = time.time_ns() + 50_000_000 if k else self.start_ns()
            end = start + int(step_s * 1e9)
            self.writer.start(start, step_s)  # the first start drops the probes' samples
            _, acked0, _ = self.writer.live()
            stop = threading.Event()
            threads = self.start_producers(r, start, end, stop)
            self.wait_until(start + int(step_s * 0.25e9))
            b1 = self.backlog()
            self.wait_until(end)
            b2 = self.backlog()
            sent_end, acked_end, _ = self.writer.live()
            stop.set()
            for th in threads:
                th.join(timeout=step_s + 10)
            secs = max(1e-9, (min(time.time_ns(), end) - start) / 1e9)
            self.flush_and_drain()
            self.writer.stop_segment()
            acked = self.writer.live()[1] - acked0
            achieved = acked / secs
            p99 = self.writer.segment_delay.percentile(99)
            growth = b2 - b1
            allowed = max(1000.0, 0.01 * r * len(self.subs) * step_s)
            # messages sent but not yet acknowledged when the step ended: a broker that confirms at a lower rate
            # than it is offered falls behind by more and more (``achieved`` counts the late acknowledgements too)
            unacked = max(0, sent_end - acked_end)
            unacked_allowed = max(1000.0, 0.01 * r * step_s)
            why = []
            if achieved < ACHIEVED_MIN_RATIO * r:
                why.append(f"achieved {achieved:,.0f} < {ACHIEVED_MIN_RATIO:.0%} of {r:,.0f} msg/s")
            if unacked > unacked_allowed:
                why.append(f"{unacked:,} messages unacknowledged at the step's end (allowed {unacked_allowed:,.0f})")
            if self.subs and growth > allowed:
                why.append(f"backlog grew by {growth} messages (allowed {allowed:,.0f})")
            if p99 is not None and p99 > bound_ms * 1000:
                why.append(f"publish-delay p99 {p99 / 1000:.1f} ms > {bound_ms:g} ms")
            if self.errors:
                why.append(self.errors[0])
            stable = not why
            steps.append({"step": k, "target_rate_msg_s": r, "achieved_rate_msg_s": round(achieved, 1),
                          "stable": stable, "reason": "; ".join(why) or "stable",
                          "publish_delay_p99_us": p99, "backlog_growth_msgs": growth,
                          "unacknowledged_at_end_msgs": unacked})
            self.say(f"sweep step {k}: target {r:,.0f} achieved {achieved:,.0f} msg/s, "
                     f"{'stable' if stable else 'UNSTABLE: ' + '; '.join(why)}")
            if stable:
                highest = r
                unstable = 0
            else:
                unstable += 1
                if unstable >= stop_after or self.errors:
                    break
        self.writer.extra = {}
        self.extra_end["sweep_steps"] = steps
        self.extra_end["highest_stable_rate_msg_s"] = highest
        self.sweep_target = highest
        best = next((s for s in steps if s["target_rate_msg_s"] == highest), None)
        self.sweep_achieved = best["achieved_rate_msg_s"] if best else None
        self.sweep_delay = best["publish_delay_p99_us"] if best else None

    # -- the end -----------------------------------------------------------------------
    def validity(self, cpu_percent: float | None, host_cpu: float | None) -> dict[str, Any]:
        t = self.writer.totals
        if self.kind == "throughput-sweep":
            target, achieved = getattr(self, "sweep_target", None), getattr(self, "sweep_achieved", None)
            delay_p99: Any = getattr(self, "sweep_delay", None)
        else:
            target = None if math.isinf(self.rate) else (self.rate if self.producers else 0)
            achieved = round(t["acked"] / self.load_s, 1) if self.producers and self.load_s else (
                round(t["received"] / self.load_s, 1) if self.load_s else None)
            delay_p99 = self.writer.phase_delay.percentile(99) if self.producers else None
        reasons = list(self.reasons)
        off = self.job.clock_offset_ms
        behind = target and achieved is not None and achieved < ACHIEVED_MIN_RATIO * target
        late = delay_p99 is not None and delay_p99 > DELAY_P99_BOUND_MS * 1000 and not math.isinf(self.rate)
        busy = cpu_percent is not None and cpu_percent >= CLIENT_CPU_BOUND_PERCENT
        host_busy = host_cpu is not None and host_cpu >= HOST_CPU_BOUND_PERCENT
        if behind:
            reasons.append(f"achieved {achieved:,.0f} msg/s < {ACHIEVED_MIN_RATIO:.0%} of the target {target:,.0f}")
        if late:
            reasons.append(f"publish-delay p99 {delay_p99 / 1000:.1f} ms > {DELAY_P99_BOUND_MS:g} ms")
        if busy:
            reasons.append(f"client process CPU {cpu_percent:.0f} % (>= {CLIENT_CPU_BOUND_PERCENT:g} %: "
                           "about one core is the ceiling of one Python process)")
        if host_busy:
            reasons.append(f"client host CPU {host_cpu:.0f} % of all cores")
        if off is not None and abs(float(off)) > CLOCK_OFFSET_WARN_MS:
            reasons.append(f"clock offset {float(off):.2f} ms (> {CLOCK_OFFSET_WARN_MS:g} ms): "
                           "end-to-end latency across hosts is suspect")
        # the generator limited the result: it fell behind (rate or schedule)
        # while its own process (or host) was saturated, or ran unthrottled
        client_bound = bool((behind or late or math.isinf(self.rate)) and (busy or host_busy))
        if self.kind == "throughput-sweep" and self.extra_end.get("sweep_steps"):
            last = self.extra_end["sweep_steps"][-1]
            client_bound = bool(not last["stable"] and (busy or host_busy))
        # the subset of the rules above that makes the measurement invalid (the
        # aggregation turns these into the summary row's status "invalid: ...";
        # the achieved-rate rule is applied there, to the merged row, see
        # docs/results-format.md): the schedule was not kept, the clocks disagree,
        # or the load generator limited the result
        invalid = []
        if client_bound:
            cpu_why = [r for r in reasons if r.startswith(("client process CPU", "client host CPU"))]
            invalid.append("client-bound: " + ("; ".join(cpu_why) if cpu_why else "the load generator was saturated"))
        if late:
            invalid.append(f"publish-delay p99 {delay_p99 / 1000:,.1f} ms > {DELAY_P99_BOUND_MS:g} ms: "
                           "the producers did not keep their send schedule")
        if off is not None and abs(float(off)) > CLOCK_OFFSET_WARN_MS:
            invalid.append(f"clock offset {float(off):.2f} ms > {CLOCK_OFFSET_WARN_MS:g} ms between hosts: "
                           "end-to-end latency across hosts is suspect")
        outage = getattr(self.writer, "outage", None) or {}
        if outage.get("intervals"):
            # a fault during the phase: its latencies and rates are not those of a serving cluster
            why = (f"unavailable: {outage['intervals']} interval(s), {outage['seconds']:,.1f} s (intervals "
                   f"{outage['first']} to {outage['last']}), with send errors or {OUTAGE_MIN_SENT}+ messages sent "
                   "and none acknowledged: a fault during the phase, not a clean measurement")
            reasons.append(why)
            invalid.append(why)
        if self.undrained > 0:
            # the messages still in the backlog are the slowest ones: without them the end-to-end
            # percentiles understate the tail
            why = (f"consumers did not catch up: {self.undrained:,} acknowledged messages not received when the drain "
                   f"ended ({self.job.drain_timeout_s:g} s after the last send); end-to-end latency covers the "
                   "received ones only")
            reasons.append(why)
            invalid.append(why)
        return {"target_rate_msg_s": target, "achieved_rate_msg_s": achieved,
                "publish_delay_p99_us": delay_p99, "cpu_percent": None if cpu_percent is None else round(cpu_percent, 1),
                "host_cpu_percent": None if host_cpu is None else round(host_cpu, 1),
                "clock_offset_ms": off, "client_bound": client_bound, "reasons": reasons,
                "invalid_reasons": invalid}

    def run(self) -> dict[str, Any]:
        job = self.job
        proc = psutil.Process()
        status, error = "ok", None
        cpu_percent = host_cpu = None
        try:
            self.connect()
            self.probe()
            self.measuring_handler()
            cpu0 = proc.cpu_times()
            wall0 = time.monotonic()
            psutil.cpu_percent(None)
            if self.kind == "throughput-sweep":
                self.run_sweep()
            elif self.kind == "backlog":
                self.run_backlog()
            elif self.kind == "consumer-only":
                self.run_consumer_only()
            else:
                self.run_constant()
            cpu1 = proc.cpu_times()
            host_cpu = psutil.cpu_percent(None)
            cpu_percent = 100.0 * ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / max(
                time.monotonic() - wall0, 1e-9)
            dead = [c.error for c in self.consumers + self.catchup_consumers if getattr(c, "error", None)]
            if self.errors:
                status, error = "error", self.errors[0]
            elif dead:
                status, error = "error", f"consumer: {dead[0]}"
        except Exception as e:
            status, error = "error", f"{type(e).__name__}: {e}"
        finally:
            for c in self.consumers + self.catchup_consumers:
                _quietly(c.close)
            for p in self.producers:
                _quietly(p.close)
            if self.driver is not None:
                _quietly(self.driver.close)

        if self.writer._thread is None and self.writer._phase_start_ns is None:
            self.writer._stop.set()  # failed before the load started: no interval to close
        self.writer.stop_segment()
        t = self.writer.totals
        unacked = t["sent"] - t["acked"] - t["send_errors"]
        if status == "ok" and (t["send_errors"] or unacked > 0):
            error = (f"{t['send_errors']} sends failed and {max(unacked, 0)} were never acknowledged "
                     f"(last error: {self.recorder.last_error})")
            status = "error"
        validity = self.validity(cpu_percent, host_cpu)
        extra = dict(self.extra_end)
        if self.writer.catchup_received:
            extra["catchup_received"] = self.writer.catchup_received
        self.writer.finish(status=status, error=error, cpu_percent=validity["cpu_percent"], kind=self.kind,
                           validity=validity, load_s=round(self.load_s, 3), **extra)
        # the row's status is decided by the aggregation (it adds the host-load and merged achieved-rate
        # rules): this line says what the worker saw, never "ok" for a row the summary may call invalid
        seen = ("invalid: " + "; ".join(validity["invalid_reasons"]) if validity["invalid_reasons"]
                else "no invalidity seen by the worker")
        self.say(f"{job.phase} done: sent {t['sent']} acked {t['acked']} received {t['received']} "
                 f"errors {t['send_errors']} cpu {validity['cpu_percent'] or 0:.0f}% worker {status}; "
                 f"{seen} (the row's status is the summary's)")
        if status != "ok":
            raise WorkerError(f"worker {job.worker} ({job.broker} at {job.endpoint.where()}): {error}")
        return {**t, "validity": validity, "load_s": self.load_s, **extra}


def as_job(job: Job | dict[str, Any]) -> Job:
    """The job as a :class:`Job` (a dict, e.g. read from a job file, is validated: JobError names its fields)."""
    return Job.parse(job)


def run_job(job: Job | dict[str, Any], out_path: str, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Run one phase; write the result file; return the totals and the end record's extras.

    Raises WorkerError after writing the file when the phase did not end well
    (every interval measured before the failure is kept in the file).
    """
    job = as_job(job)
    if getattr(driver_class(job.broker, job.client_library), "engine", None) == "jvm":
        return _run_in_jvm(job, out_path, progress)
    switch = job.switch_interval_s
    if switch:
        # the producer thread waits for the GIL after each wait for its schedule;
        # with Python's 5 ms default a library thread holding the GIL shows up
        # as milliseconds of publish delay
        sys.setswitchinterval(float(switch))
    return _Phase(job, out_path, progress).run()


def _run_in_jvm(job: Job, out_path: str, progress: Callable[[str], None]) -> dict[str, Any]:
    """The JVM engine runs the phase (brokerbench.worker.jvm); the same return and errors as :func:`run_job`."""
    import json

    from brokerbench.worker import jvm

    try:
        code, last = jvm.run_job(job, out_path, progress=progress)
    except jvm.JvmEngineError as e:
        raise WorkerError(f"worker {job.worker} ({job.broker}): JVM engine: {e}") from None
    end: dict[str, Any] = {}
    try:
        with open(out_path, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                if record.get("record") == "end":
                    end = record
    except (OSError, ValueError):
        pass
    if code != 0:
        why = end.get("error") or last or f"exit {code}"
        raise WorkerError(f"worker {job.worker} ({job.broker} at {job.endpoint.where()}): JVM engine: {why}")
    extra = {k: v for k, v in end.items() if k not in ("record", "end_ns", "status", "error", "totals", "cpu_percent",
                                                       "kind")}
    return {**end.get("totals", {}), **extra}


def prepare_job(job: Job | dict[str, Any]) -> None:
    """Create the job's topics and subscriptions on the broker."""
    job = as_job(job)
    cls = driver_class(job.broker, job.client_library)
    if getattr(cls, "engine", None) == "jvm":
        from brokerbench.worker import jvm

        jvm.ensure_built(progress=lambda line: log.info("%s", line))  # before the phases: they start on time
    driver = cls(job.endpoint, job.driver, Recorder())
    try:
        driver.prepare(job.topics, job.workload.partitions_per_topic, job.subscriptions)
    finally:
        driver.close()


def _quietly(fn) -> None:
    try:
        fn()
    except Exception as e:
        log.debug("close: %s", e)
