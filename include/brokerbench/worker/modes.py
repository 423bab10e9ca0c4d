"""A phase's load: the producers' open-loop schedule, and the run modes of the workload kinds (docs/worker.md).

:class:`Load` holds what every mode does with the clients (start the producers, wait, read the backlog, flush
and drain) and what the phase notes for its end record; :data:`MODES` runs a kind's load on it.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable

from brokerbench.worker.clients import Clients
from brokerbench.worker.job import Job
from brokerbench.worker.layout import ClientLayout
from brokerbench.worker.payload import STAMP, key_iterator, payload_pool
from brokerbench.worker.recorder import IntervalWriter, Recorder
from brokerbench.worker.validity import ACHIEVED_MIN_RATIO, PhaseFacts, SweepOutcome

#: from the end of a measured phase's lead-in to its first interval: the producers' flush and the consumers'
#: catching up, s (a process that needs longer starts as soon as it is done)
LEAD_IN_SETTLE_S = 0.5


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


class Load:
    """The load of one phase on its clients, and what it notes for the end record."""

    def __init__(self, job: Job, layout: ClientLayout, clients: Clients, writer: IntervalWriter, recorder: Recorder,
                 say: Callable[[str], None]):
        self.job, self.layout, self.clients, self.writer, self.recorder = job, layout, clients, writer, recorder
        self.say = say
        #: what went wrong while sending (a producer thread appends)
        self.errors: list[str] = []
        #: fields of the end record besides the totals
        self.extra_end: dict[str, Any] = {}
        #: what the phase noted as it ran, for the validity reasons
        self.reasons: list[str] = []
        #: the seconds the load ran
        self.load_s = 0.0
        #: acknowledged messages its subscriptions had not received when the drain ended
        self.undrained = 0
        self.sweep: SweepOutcome | None = None

    def backlog(self) -> int:
        _, acked, received = self.writer.live()
        subs = self.layout.subs
        return max(0, acked * len(subs) - received) if subs else 0

    def start_producers(self, rate: float, start_ns: int, end_ns: int, stop: threading.Event):
        workload = self.job.workload
        pool = payload_pool(workload)
        producers = self.clients.producers
        per = rate / len(producers)
        threads = [threading.Thread(target=_producer_loop, name=f"producer-{i}", daemon=True,
                                    args=(p, per, start_ns, end_ns, pool, key_iterator(workload.key_distributor),
                                          self.recorder, self.errors, stop))
                   for i, p in enumerate(producers)]
        for th in threads:
            th.start()
        return threads

    def wait_until(self, end_ns: int, stop: threading.Event | None = None,
                   until: Callable[[], bool] | None = None) -> None:
        while time.time_ns() < end_ns and not self.errors and not (stop is not None and stop.is_set()):
            if until is not None and until():
                return
            time.sleep(min(0.1, max(0.0, (end_ns - time.time_ns()) / 1e9)))

    def _flush_and_catch_up(self, poll_s: float) -> tuple[float, bool]:
        """The producers flushed (each bounded by drain_timeout_s), then the subscriptions caught up, looked at
        every ``poll_s`` and bounded by drain_timeout_s: (seconds the flush took, whether they caught up)."""
        timeout = self.job.drain_timeout_s
        t0 = time.monotonic()
        for p in self.clients.producers:
            p.flush(timeout)
        flushed = time.monotonic()
        deadline = flushed + timeout
        while self.clients.consumers and time.monotonic() < deadline and not self.errors:
            if self.backlog() == 0:
                return flushed - t0, True
            time.sleep(poll_s)
        return flushed - t0, False

    def flush_and_drain(self) -> None:
        flush_s, caught_up = self._flush_and_catch_up(0.05)
        self.extra_end["flush_s"] = round(self.extra_end.get("flush_s", 0) + flush_s, 4)
        if caught_up:
            time.sleep(0.2)  # a late probe counted as received may hide one message
        if self.clients.consumers and self.layout.owns_subscriptions():
            self.undrained = self.backlog()

    def lead_in(self, begin_ns: int) -> int:
        """The lead-in of a measured phase: the schedule at the target rate for the job's lead_in_s from
        ``begin_ns``, then the producers flushed and the subscriptions caught up (bounded by drain_timeout_s), so
        that the measured schedule starts with nothing in flight. Returns the measured schedule's start:
        LEAD_IN_SETTLE_S after the lead-in's end (the same for every process sharing a start), or at once when
        settling took longer."""
        lead_in_s = self.job.lead_in_s
        self.say(f"lead-in: {lead_in_s:g} s at the target rate, not recorded (the clients' own start-up)")
        lead_end = begin_ns + int(lead_in_s * 1e9)
        self.recorder.swap()  # the probes' samples: the backlog below counts the lead-in's messages only
        stop = threading.Event()
        threads = self.start_producers(self.layout.rate, begin_ns, lead_end, stop)
        self.wait_until(lead_end)
        stop.set()
        for th in threads:
            th.join(timeout=max(5.0, lead_in_s))
        self._flush_and_catch_up(0.01)
        return max(lead_end + int(LEAD_IN_SETTLE_S * 1e9), time.time_ns() + 50_000_000)

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

    def facts(self) -> PhaseFacts:
        """What the validity rules read of the phase."""
        return PhaseFacts(kind=self.layout.kind, rate=self.layout.rate, producers=bool(self.clients.producers),
                          load_s=self.load_s, totals=self.writer.totals, phase_delay=self.writer.phase_delay,
                          clock_offset_ms=self.job.clock_offset_ms, drain_timeout_s=self.job.drain_timeout_s,
                          reasons=self.reasons, outage=self.writer.outage, undrained=self.undrained,
                          sweep=self.sweep, sweep_steps=self.extra_end.get("sweep_steps") or [])


# -- the run modes --------------------------------------------------------------------------------------------

def run_constant(load: Load) -> None:
    """latency, producer-only, mixed: the job's lead-in (not recorded), the schedule for duration_s, then flush
    and drain."""
    layout, clients, writer = load.layout, load.clients, load.writer
    producing = bool(clients.producers) and layout.rate > 0
    start = load.start_ns()
    if load.job.lead_in_s and producing:
        start = load.lead_in(start)
    end = start + int(layout.duration_s * 1e9)
    writer.start(start, layout.duration_s)  # drops what came before: the probes, the lead-in
    if writer.lead_in_sent:
        load.extra_end["lead_in"] = {"seconds": load.job.lead_in_s, "sent": writer.lead_in_sent}
    stop = threading.Event()
    threads = load.start_producers(layout.rate, start, end, stop) if producing else []
    if clients.catchup_consumers:
        catchup_s = load.job.catchup_start_s
        at = start + int(float(layout.duration_s / 3 if catchup_s is None else catchup_s) * 1e9)
        load.wait_until(at)
        for c in clients.catchup_consumers:
            c.resume()
        load.say("catch-up subscription started reading from the beginning")
    load.wait_until(end)
    stop.set()
    for th in threads:
        th.join(timeout=max(5.0, layout.duration_s))
    load.load_s = max(1e-9, (min(time.time_ns(), end) - start) / 1e9)
    load.flush_and_drain()


def run_consumer_only(load: Load) -> None:
    """consumer-only: read what the topics hold until the duration ends, or nothing arrived for consumer_idle_s."""
    writer = load.writer
    start = load.start_ns()
    end = start + int(load.layout.duration_s * 1e9)
    writer.start(start, load.layout.duration_s)
    idle_s = load.job.consumer_idle_s
    last = [0, time.monotonic()]

    def idle() -> bool:
        received = writer.live()[2]
        if received != last[0]:
            last[0], last[1] = received, time.monotonic()
            return False
        return received > 0 and time.monotonic() - last[1] > idle_s

    load.wait_until(end, until=idle)
    load.load_s = max(1e-9, (time.time_ns() - start) / 1e9)
    load.extra_end["consumer_only"] = {"received": writer.live()[2],
                                       "ended_by": "idle" if time.time_ns() < end else "duration"}


def run_backlog(load: Load) -> None:
    """Build consumerBacklogSizeGB with consumers paused, then drain to backlogDrainRatio (bounded)."""
    layout, clients, workload = load.layout, load.clients, load.job.workload
    size = layout.message_size
    requested = float(workload.consumer_backlog_size_gb or 0) * 1024 ** 3
    capacity = requested / size  # messages (per subscription)
    # drained: at most (1 - backlogDrainRatio) of the requested backlog is left,
    # plus what is in flight while producers keep sending (their rate x 100 ms)
    empty_level = (1.0 - workload.backlog_drain_ratio) * capacity + layout.rate * 0.1
    for c in clients.consumers:  # they joined and found their position during the probe
        c.pause()
    time.sleep(0.3)
    start = load.start_ns()
    end = start + int(layout.duration_s * 1e9)
    load.writer.start(start, layout.duration_s)
    stop = threading.Event()
    threads = load.start_producers(layout.rate, start, end, stop)
    per_sub = lambda: load.backlog() / max(1, len(layout.subs))  # noqa: E731
    load.wait_until(end, until=lambda: per_sub() >= capacity)
    built = per_sub() >= capacity
    t_built = time.time_ns()
    peak = load.backlog()
    info = {"requested_bytes": int(requested), "built": built, "build_s": round((t_built - start) / 1e9, 3),
            "peak_backlog_msgs": peak, "drain_ratio": workload.backlog_drain_ratio}
    load.say(f"backlog {'built' if built else 'NOT built'}: {peak} messages; consumers resume")
    for c in clients.consumers:
        c.resume()
    load.wait_until(end, until=lambda: per_sub() <= empty_level)
    drained = per_sub() <= empty_level
    info.update(drained=drained, drain_s=round((time.time_ns() - t_built) / 1e9, 3),
                backlog_at_end_msgs=load.backlog())
    stop.set()
    for th in threads:
        th.join(timeout=10)
    load.load_s = max(1e-9, (time.time_ns() - start) / 1e9)
    if not built:
        load.reasons.append(f"backlog of {requested / 1e9:.2f} GB not built within {layout.duration_s:g} s")
    elif not drained:
        load.reasons.append(f"backlog not drained to {info['drain_ratio']:g} within {layout.duration_s:g} s")
    load.extra_end["backlog"] = info
    load.flush_and_drain()


def run_sweep(load: Load) -> None:
    """throughput-sweep: one step per target rate, each judged stable or not; the highest stable one reported."""
    job, layout, writer = load.job, load.layout, load.writer
    rates = layout.sweep_rates
    step_s = float(job.step_duration_s or max(layout.interval_s, layout.duration_s / len(rates)))
    steps: list[dict[str, Any]] = []
    unstable, highest = 0, None
    for k, r in enumerate(rates):
        writer.extra = {"step": k, "step_target_rate_msg_s": r}
        start = time.time_ns() + 50_000_000 if k else load.start_ns()
        end = start + int(step_s * 1e9)
        writer.start(start, step_s)  # the first start drops the probes' samples
        _, acked0, _ = writer.live()
        stop = threading.Event()
        threads = load.start_producers(r, start, end, stop)
        load.wait_until(start + int(step_s * 0.25e9))
        b1 = load.backlog()
        load.wait_until(end)
        b2 = load.backlog()
        sent_end, acked_end, _ = writer.live()
        stop.set()
        for th in threads:
            th.join(timeout=step_s + 10)
        secs = max(1e-9, (min(time.time_ns(), end) - start) / 1e9)
        load.flush_and_drain()
        writer.stop_segment()
        step = _judge_step(load, k, r, step_s, achieved=(writer.live()[1] - acked0) / secs,
                           p99=writer.segment_delay.percentile(99), publish_p99=writer.segment_publish.percentile(99),
                           growth=b2 - b1, unacked=max(0, sent_end - acked_end))
        steps.append(step)
        if step["stable"]:
            highest = r
            unstable = 0
        else:
            unstable += 1
            if unstable >= job.sweep_stop_after_unstable or load.errors:
                break
    writer.extra = {}
    load.extra_end["sweep_steps"] = steps
    load.extra_end["highest_stable_rate_msg_s"] = highest
    best = next((s for s in steps if s["target_rate_msg_s"] == highest), None)
    load.sweep = SweepOutcome(target=highest, achieved=best["achieved_rate_msg_s"] if best else None,
                              delay_p99_us=best["publish_delay_p99_us"] if best else None)


def _judge_step(load: Load, k: int, r: float, step_s: float, *, achieved: float, p99: Any, publish_p99: Any,
                growth: int, unacked: int) -> dict[str, Any]:
    """A sweep step's record: stable unless it fell behind its rate, left messages unacknowledged, grew the
    backlog, was late on its schedule, took longer than the workload's bound to acknowledge (publish latency
    p99, µs like ``p99``), or failed."""
    bound_ms = load.job.sweep_max_delay_p99_ms
    publish_bound_ms = load.job.workload.sweep_max_publish_p99_ms
    subs = load.layout.subs
    allowed = max(1000.0, 0.01 * r * len(subs) * step_s)
    # messages sent but not yet acknowledged when the step ended: a broker that confirms at a lower rate
    # than it is offered falls behind by more and more (``achieved`` counts the late acknowledgements too)
    unacked_allowed = max(1000.0, 0.01 * r * step_s)
    why = []
    if achieved < ACHIEVED_MIN_RATIO * r:
        why.append(f"achieved {achieved:,.0f} < {ACHIEVED_MIN_RATIO:.0%} of {r:,.0f} msg/s")
    if unacked > unacked_allowed:
        why.append(f"{unacked:,} messages unacknowledged at the step's end (allowed {unacked_allowed:,.0f})")
    if subs and growth > allowed:
        why.append(f"backlog grew by {growth} messages (allowed {allowed:,.0f})")
    if p99 is not None and p99 > bound_ms * 1000:
        why.append(f"publish-delay p99 {p99 / 1000:.1f} ms > {bound_ms:g} ms")
    if publish_p99 is not None and publish_p99 > publish_bound_ms * 1000:
        why.append(f"publish p99 {publish_p99 / 1000:,.1f} ms > {publish_bound_ms:g} ms (the step's latency bound)")
    if load.errors:
        why.append(load.errors[0])
    stable = not why
    load.say(f"sweep step {k}: target {r:,.0f} achieved {achieved:,.0f} msg/s, "
             f"{'stable' if stable else 'UNSTABLE: ' + '; '.join(why)}")
    return {"step": k, "target_rate_msg_s": r, "achieved_rate_msg_s": round(achieved, 1),
            "stable": stable, "reason": "; ".join(why) or "stable",
            "publish_delay_p99_us": p99, "publish_latency_p99_us": publish_p99,
            "publish_p99_bound_ms": publish_bound_ms, "backlog_growth_msgs": growth,
            "unacknowledged_at_end_msgs": unacked}


#: workload kind -> its run mode (every other kind: :func:`run_constant`)
MODES: dict[str, Callable[[Load], None]] = {
    "throughput-sweep": run_sweep,
    "backlog": run_backlog,
    "consumer-only": run_consumer_only,
}
